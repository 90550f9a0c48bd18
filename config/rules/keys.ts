/**
 * Idempotency keys from business identity: `(campaign, round, step or phase, operation)`, never an activity id or
 * attempt, so every attempt of an activity (and every run of a workflow after continue-as-new) sends the same key.
 */
export function roundKey(campaignId: string, round: number, ...parts: (string | number)[]): string {
  return [campaignId, `r${round}`, ...parts].join('/');
}

/** Key parts that set a lineage apart: none for the first (the keys rounds always had), `L<n>` after a rollback. */
export function lineageParts(lineage: number | undefined): string[] {
  return lineage ? [`L${lineage}`] : [];
}
