/**
 * Imported first by `cli/eos.ts`: what must be in place before any other module loads.
 * - `Promise.withResolvers` for the local state machine interpreter on Node 20;
 * - the AWS SDK's Node-version notice silenced: it would interleave with the report on every run;
 * - a reader that stops reading (`eos read … | head -2`) ends the command quietly, as other Unix tools do, instead
 *   of an EPIPE stack trace: there is no one left to tell.
 */
import '../local/polyfills.ts';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(0);
  throw error;
});
