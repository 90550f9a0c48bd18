// Pure (no Temporal, no Node): the round's workflow code tags what it creates, the reaper activity reads the tags back.

/** Resources and sessions a round creates carry this tag (name / display name): how the reaper finds the owner. */
export const OWNER_TAG_PREFIX = 'roundhouse:';

export function ownerTagFor(workflowId: string): string {
  return `${OWNER_TAG_PREFIX}${workflowId}`;
}

/** A round's second, frozen session (the GRPO reference policy) is tagged apart, so adoption never confuses the two. */
export const REFERENCE_TAG_PREFIX = 'roundhouse-reference:';

export function referenceTagFor(workflowId: string): string {
  return `${REFERENCE_TAG_PREFIX}${workflowId}`;
}

/** The owning workflow id of a tagged resource or session, or undefined for one Roundhouse did not create. */
export function ownerOfTag(tag: string | undefined): string | undefined {
  if (tag?.startsWith(OWNER_TAG_PREFIX)) return tag.slice(OWNER_TAG_PREFIX.length);
  if (tag?.startsWith(REFERENCE_TAG_PREFIX)) return tag.slice(REFERENCE_TAG_PREFIX.length);
  return undefined;
}
