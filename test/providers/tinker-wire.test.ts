import { decodeForwardBackwardOutput, decodeSampleResponse, encodeForwardBackward } from '../../providers/tinker/wire';

/**
 * The provider's Tinker protobuf codec against bytes the official SDK 0.38.0's own converters produced
 * (providers/tinker/WIRE.md §5, "Test vectors"): the request is byte for byte the SDK's, and the SDK's results
 * decode to what they hold.
 */
const hex = (s: string) => Buffer.from(s, 'hex');

test('encodes a forward_backward request exactly as the SDK does: int32 tokens, int64 targets, float32 weights', () => {
  const bytes = encodeForwardBackward({
    modelId: 'm',
    seqId: 1,
    lossFn: 'cross_entropy',
    data: [{ tokens: [1, 2, 3], targetTokens: [2, 3, 4], floats: { weights: [1, 1, 1] } }],
  });
  expect(Buffer.from(bytes).toString('hex')).toBe(
    '0a016d10011a640a100a0e0a0c01000000020000000300000012300a0d7461726765745f746f6b656e73121f0a180200000000000000030000000000000004000000000000001802220103121e0a077765696768747312130a0c0000803f0000803f0000803f1801220103220d63726f73735f656e74726f7079',
  );
});

test('decodes the SDK’s forward result (per-datum logprobs at byte offsets, loss:sum) and sample result (NaN → null)', () => {
  expect(
    decodeForwardBackwardOutput(
      hex(
        '0a0b41727261795265636f72641242123e0a086c6f6770726f627312320a14000000bf000080be000080bf000000c0000040c0121800000000000000000c000000000000001400000000000000180118021a130a086c6f73733a73756d110000000000001b40',
      ),
    ),
  ).toEqual({ outputs: [{ logprobs: [-0.5, -0.25, -1] }, { logprobs: [-2, -3] }], metrics: { 'loss:sum': 6.75 } });
  const sample = decodeSampleResponse(hex('0a14120807000000080000001a08cdccccbdcdcc4cbe120c0000c07f0000c0bf000020c0'));
  expect(sample.sequences).toHaveLength(1);
  expect(sample.sequences[0]!.tokens).toEqual([7, 8]);
  expect(sample.sequences[0]!.stopReason).toBe('stop');
  sample.sequences[0]!.logprobs.forEach((v, i) => expect(v).toBeCloseTo([-0.1, -0.2][i]!, 6));
  expect(sample.promptLogprobs).toEqual([null, -1.5, -2.5]);
});

test('a result that is not the protobuf it should be fails as a bad response, not as a retry', () => {
  expect(() => decodeForwardBackwardOutput(hex('0a0a'))).toThrow(/tinker: unexpected forward result/);
});
