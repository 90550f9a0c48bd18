/** How the campaign reports write text and figures: HTML-escaped text, numbers and percentages (– where none). */

export const escapeHtml = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
export const fmt = (v: number | null | undefined, digits = 3) => (v === null || v === undefined ? '–' : v.toFixed(digits));
export const pct = (v: number | null | undefined) => (v === null || v === undefined ? '–' : `${(v * 100).toFixed(1)}%`);
