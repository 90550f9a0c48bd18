import { ProvisionGate } from '../../workflows/provision-gate/provision-gate';

/**
 * The gate's rules without a server, where timing decides: a waiter's acquire that reaches the gate in the same
 * workflow task as the timer of the holder's expiring lease (the update is handled first, so nothing has handed the
 * gate over yet). Found by CI under load: the waiter got two grants, one of them never settled.
 */
test('the first in line, asking as the holder’s lease runs out, gets one grant (the handed-off one), and it is settled on release', () => {
  const gate = new ProvisionGate({ epoch: 'e', generation: 0, grants: [] }, 0);
  gate.take('round-a', 2_000, 0);
  expect(gate.wait('round-b', 100)).toMatchObject({ granted: false, waiting: 1 });

  // 2.5 s: round-a's lease ran out, and round-b's acquire is handled before the loop's expire.
  const now = 2_500;
  expect(gate.mayTake('round-b', now)).toBe(true);
  gate.take('round-b', 2_000, now);
  expect(gate.holds('round-b', now)).toBe(true);
  const lease = gate.renew('round-b', 2_000, now);
  expect(lease.generation).toBe(2); // round-a's was 1: no grant in between
  const grants = gate.state().grants;
  expect(grants.map((g) => [g.generation, g.owner])).toEqual([
    [1, 'round-a'],
    [2, 'round-b'],
  ]);
  expect(grants[1]!.unclaimed).toBeUndefined(); // claimed by its acquire

  expect(gate.release({ owner: 'round-b', lease, resourceId: 'mr-b' }, now + 100)).toBe(true);
  expect(
    gate
      .state()
      .grants.filter((g) => g.owner === 'round-b')
      .every((g) => g.settled),
  ).toBe(true);
});
