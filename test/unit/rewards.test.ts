import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { finalNumber, groupAdvantages, rewardFunction } from '../../activities/rewards';

describe('rewards for policy-gradient rounds', () => {
  test('GSM8K-style numeric answers: the number after ####, else the last number; commas and decimals handled', async () => {
    expect(finalNumber('She sells 16 - 3 - 4 = 9 eggs, so 9 * 2 = 18 dollars. #### 18')).toBe(18);
    expect(finalNumber('so the answer is 1,250 apples')).toBe(1250);
    expect(finalNumber('-3.5 degrees')).toBe(-3.5);
    expect(finalNumber('no number here')).toBeUndefined();
    const numeric = rewardFunction({ kind: 'numeric' });
    expect(await numeric('The total is 72.', 'Natalia sold 48/2 = 24 clips in May. #### 72', '')).toBe(1);
    expect(await numeric('The total is 71.', '#### 72', '')).toBe(0);
  });

  test('the built-in matchers reward 1 or 0 like the evaluation scorer', async () => {
    expect(await rewardFunction({ kind: 'exact' })(' Billing ', 'billing', '')).toBe(1);
    expect(await rewardFunction({ kind: 'contains' })('it is a refund case', 'refund', '')).toBe(1);
    expect(await rewardFunction({ kind: 'regex', pattern: '^answer: {answer}$' })('answer: 7', '7', '')).toBe(1);
    expect(await rewardFunction({ kind: 'exact' })('login', 'billing', '')).toBe(0);
  });

  test('a user module supplies the reward', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-reward-'));
    fs.writeFileSync(path.join(dir, 'length.js'), 'exports.reward = (completion) => -completion.length;');
    expect(await rewardFunction({ kind: 'module', path: 'length.js' }, dir)('abc', 'x', 'p')).toBe(-3);
    fs.writeFileSync(path.join(dir, 'none.js'), 'exports.other = 1;');
    expect(() => rewardFunction({ kind: 'module', path: 'none.js' }, dir)).toThrow(/exports no function 'reward'/);
  });

  test('advantages are centred per group; constant-reward groups are dropped', () => {
    const [a, b, c] = groupAdvantages([[1, 0, 0, 1], [1, 1, 1, 1], [0.5]]);
    expect(a).toEqual([0.5, -0.5, -0.5, 0.5]);
    expect(b).toBeUndefined();
    expect(c).toBeUndefined();
    const [n] = groupAdvantages([[1, 0, 0, 1]], { normalize: true });
    expect(n).toEqual([1, -1, -1, 1]);
  });
});
