import { defineUpdate } from '@temporalio/workflow';

/** A checkpoint's accuracy on a set of rows, and which rows (their sha256): figures compare only on the same rows. */
export interface PromotionFigures {
  on: 'test' | 'eval';
  accuracy: number;
  rows: number;
  sha256: string;
  /** The round report they were read from. */
  reportPath: string;
}

export interface PromotionCandidate {
  checkpointId: string;
  campaignId: string;
  round: number;
  reportPath: string;
}

/** A model line's champion (`<root>/lines/<line>/champion.json`). */
export interface ChampionRecord {
  line: string;
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
  /** The champion's own re-scoring on the challenger's rows (an evaluation-only round), once run. */
  rescoredChampion?: { reportPath: string };
}

export interface PromotionDecision {
  decisionId: string;
  line: string;
  on: 'test' | 'eval';
  minGain: number;
  challenger: Omit<PromotionCandidate, 'reportPath'> & { reportPath: string; figures: PromotionFigures };
  champion?: { checkpointId: string; campaignId: string; round: number; figures: PromotionFigures; rescored?: boolean };
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
