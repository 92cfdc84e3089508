/** Progress lines on stderr while the end-to-end and visibility runs go, one per run. */
export function progress(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}
