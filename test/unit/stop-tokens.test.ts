import { completionText, tokensThroughStop } from '../../activities/scoring';
import { tokenizerFor } from '../../config/io/tokenizer';

// The tokens a GRPO step trains on end where the text the reward or environment saw was cut: through the token that
// completes the first stop string (what a sampler that honours stop strings returns; Tinker's runs on past it).
const tokenizer = tokenizerFor('roundhouse/tiny-chat', undefined);

test('tokens are cut through the token completing the first stop string, and their text is the text that was scored', () => {
  const drawn = tokenizer.encode('refund\nmore\nstill more');
  const cut = tokensThroughStop(tokenizer, drawn, ['\n']);
  expect(cut).toEqual(drawn.slice(0, cut.length));
  expect(tokenizer.decode(cut)).toContain('\n');
  expect(tokenizer.decode(cut.slice(0, -1))).not.toContain('\n');
  expect(completionText(tokenizer, cut, ['\n'])).toBe(completionText(tokenizer, drawn, ['\n']));
  expect(completionText(tokenizer, cut, ['\n'])).toBe('refund');
});

test('without a stop in the text (or before end-of-turn), the tokens stay as drawn', () => {
  const drawn = tokenizer.encode('refund please');
  expect(tokensThroughStop(tokenizer, drawn, ['\n'])).toEqual(drawn);
  expect(tokensThroughStop(tokenizer, drawn, undefined)).toEqual(drawn);
  const ended = [...tokenizer.encode('billing'), tokenizer.tokenId('<|im_end|>')!, ...tokenizer.encode('\njunk')];
  expect(tokensThroughStop(tokenizer, ended, ['\n'])).toEqual(ended);
});
