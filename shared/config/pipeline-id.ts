/**
 * The pipeline id when nothing names one: the setting's default, and so the default of the stack, the coordinator's
 * telemetry and the `eos` commands. A module of its own, without zod, so that `eos --help` can name it without
 * loading the settings schema.
 */
export const DEFAULT_PIPELINE_ID = 'orders';
