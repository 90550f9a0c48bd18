import { defineUpdate } from '@temporalio/workflow';

/** How figures were measured: two compare only when their scorer and sampling are the same (and their rows). */
export interface PromotionMeasure {
  /** The provider's base model the adapter belongs to: an adapter of another base cannot be re-scored. */
  baseModel: string;
  /** The scorer's settings (`evaluation` without its training-time schedule). */
  scorer: Record<string, unknown>;
  /** How evaluation sampled (`evaluation.sampling` over its defaults; records before it: the `sampling` block). */
  sampling: Record<string, unknown>;
}

/** A checkpoint's accuracy on a set of rows, and which rows (their sha256): figures compare only on the same rows. */
export interface PromotionFigures {
  on: 'test' | 'eval';
  accuracy: number;
  rows: number;
  sha256: string;
  /** The round report they were read from. */
  reportPath: string;
  /** How they were measured (absent in records made before it was recorded: such a champion is re-scored). */
  measure?: PromotionMeasure;
}

export interface PromotionCandidate {
  checkpointId: string;
  campaignId: string;
  round: number;
  reportPath: string;
}

/** A model line's champion (`<root>/lines/<line>/champions/<version>.json`, the newest is the champion). */
export interface ChampionRecord {
  line: string;
  /** Its number on the line (1, 2, …); absent in the one unnumbered record of a line made before numbering. */
  version?: number;
  checkpointId: string;
  campaignId: string;
  round: number;
  /** What it was promoted on. */
  figures: PromotionFigures;
  promotedAt: string;
  decisionId: string;
  /** With MLflow configured: the registered model version the `champion` alias points at. */
  registry?: { name: string; version: string };
  /** Every change of champion, oldest first. */
  history: {
    decisionId: string;
    checkpointId: string;
    campaignId: string;
    round: number;
    at: string;
    figures: PromotionFigures;
    reason: string;
    replaced?: string;
    /** The champion it replaced could not be scored like the challenger (another base model): why it was retired. */
    retired?: string;
    approvedBy?: string;
  }[];
}

export interface PromotionRule {
  on: 'test' | 'eval';
  minGain: number;
}

export interface PromotionJudgeInput {
  decisionId: string;
  line: string;
  rule: PromotionRule;
  reportRoot: string;
  challenger: PromotionCandidate;
  /** How the challenger was measured (a champion measured otherwise is re-scored); absent in older histories. */
  measure: PromotionMeasure;
  /** The champion's own re-scoring on the challenger's rows (an evaluation-only round), once run. */
  rescoredChampion?: { reportPath: string };
}

export interface PromotionDecision {
  decisionId: string;
  line: string;
  on: 'test' | 'eval';
  minGain: number;
  challenger: Omit<PromotionCandidate, 'reportPath'> & { reportPath: string; figures: PromotionFigures };
  champion?: {
    checkpointId: string;
    campaignId: string;
    round: number;
    figures: PromotionFigures;
    rescored?: boolean;
    /** It cannot be scored like the challenger (another base model): this decision retires it, and says why. */
    retired?: string;
  };
  /** The number of the champion judged against (absent: the line had none); recorded only if it is still the newest. */
  championVersion?: number;
  /** `rescore`: the champion's figures are for other rows; it is measured on the challenger's first. */
  verdict: 'promote' | 'keep' | 'rescore';
  reason: string;
}

export interface PromotionApproval {
  approved: boolean;
  by: string;
  reason?: string;
  atMs: number;
}

export interface PromotionRecordInput {
  reportRoot: string;
  decision: PromotionDecision;
  approval?: PromotionApproval;
  atMs: number;
}

/** The champion recorded (or undefined: not promoted), or why the decision must be judged again first. */
export type PromotionRecordResult = ChampionRecord | { changedSince: string } | undefined;

/** What a campaign shows of its promotion: pending since when, then the outcome. */
export interface PromotionState {
  line: string;
  status: 'deciding' | 'rescoring' | 'pending-approval' | 'promoted' | 'kept' | 'rejected' | 'skipped';
  reason?: string;
  decision?: PromotionDecision;
  approval?: PromotionApproval;
  /** `pending-approval`: since when, and until when it may wait. */
  pendingSinceMs?: number;
  timeoutAtMs?: number;
  champion?: { checkpointId: string; registry?: { name: string; version: string } };
  /** The champion is recorded in the store; the registry (MLflow) could not be told, and why. */
  registryError?: string;
}

export interface ApprovalRequest {
  /** Who decides (a name or an email): recorded with the decision. */
  by: string;
  reason?: string;
}

/** `roundhouse approve <id>`: promote the pending challenger. Only while a promotion waits for approval. */
export const approvePromotionUpdate = defineUpdate<PromotionState, [ApprovalRequest]>('approvePromotion');
/** `roundhouse reject <id> --reason …`: keep the champion. Only while a promotion waits for approval. */
export const rejectPromotionUpdate = defineUpdate<PromotionState, [ApprovalRequest]>('rejectPromotion');

/** The updates' validators: a request without who (or, to reject, why), or when nothing waits, never reaches the history. */
export function validateApproval(request: ApprovalRequest, pending: boolean, rejecting: boolean): void {
  if (!pending) throw new Error('no promotion is waiting for approval in this campaign');
  if (typeof request?.by !== 'string' || request.by.trim() === '') throw new Error('by: who decides is required');
  if (rejecting && (typeof request.reason !== 'string' || request.reason.trim() === ''))
    throw new Error('reason: a rejection needs a reason');
}
