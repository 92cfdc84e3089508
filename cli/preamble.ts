/**
 * Imported first by `cli/eos.ts`: what must be in place before any other module loads.
 * - `Promise.withResolvers` for the local state machine interpreter on Node 20;
 * - the AWS SDK's Node-version notice silenced: it would interleave with the report on every run.
 */
import '../local/polyfills.ts';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
