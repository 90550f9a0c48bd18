import { decodeForwardBackwardRequest, encodeForwardBackwardOutput, encodeSampleResponse } from '../../emulator/tinker/proto';

/**
 * The emulator's Tinker protobuf codec against bytes the official SDK 0.38.0's own converters produced
 * (providers/tinker/WIRE.md §5, "Test vectors"): what the SDK sends decodes to what it meant, and what the emulator
 * answers is byte for byte what the SDK's encoder makes of the same result.
 */
const hex = (s: string) => Buffer.from(s, 'hex');

test('decodes the SDK’s forward_backward request: model, seq_id, tokens, int64 targets, float32 weights, loss', () => {
  const request = decodeForwardBackwardRequest(
    hex(
      '0a016d10011a640a100a0e0a0c01000000020000000300000012300a0d7461726765745f746f6b656e73121f0a180200000000000000030000000000000004000000000000001802220103121e0a077765696768747312130a0c0000803f0000803f0000803f1801220103220d63726f73735f656e74726f7079',
    ),
  );
  expect(request).toEqual({
    modelId: 'm',
    seqId: 1,
    data: [
      {
        tokens: [1, 2, 3],
        lossFnInputs: {
          target_tokens: { dtype: 'int64', shape: [3], data: [2, 3, 4] },
          weights: { dtype: 'float32', shape: [3], data: [1, 1, 1] },
        },
      },
    ],
    lossFn: 'cross_entropy',
    lossFnConfig: {},
    forwardOnly: false,
  });
});

test('encodes a forward_backward result exactly as the SDK’s encoder does: one record, float32 logprobs at byte offsets, loss:sum', () => {
  const bytes = encodeForwardBackwardOutput({
    outputs: [{ logprobs: [-0.5, -0.25, -1] }, { logprobs: [-2, -3] }],
    metrics: { 'loss:sum': 6.75 },
  });
  expect(Buffer.from(bytes).toString('hex')).toBe(
    '0a0b41727261795265636f72641242123e0a086c6f6770726f627312320a14000000bf000080be000080bf000000c0000040c0121800000000000000000c000000000000001400000000000000180118021a130a086c6f73733a73756d110000000000001b40',
  );
  expect(() => encodeForwardBackwardOutput({ outputs: [], metrics: { loss: 1 } })).toThrow(/name:reduction/);
});

test('encodes a sample result exactly as the SDK’s encoder does: int32 tokens, float32 logprobs, NaN for the first prompt token', () => {
  const bytes = encodeSampleResponse({
    sequences: [{ tokens: [7, 8], logprobs: [-0.1, -0.2], stopReason: 'stop' }],
    promptLogprobs: [null, -1.5, -2.5],
  });
  expect(Buffer.from(bytes).toString('hex')).toBe('0a14120807000000080000001a08cdccccbdcdcc4cbe120c0000c07f0000c0bf000020c0');
});

test('a malformed body and a shape that does not fit its data are refused with what is wrong', () => {
  expect(() => decodeForwardBackwardRequest(hex('0a0a'))).toThrow(/not a ForwardBackwardRequest protobuf/);
  // target_tokens claims shape [4] over 3 int64 values.
  const misshapen = hex(
    '0a016d10011a640a100a0e0a0c01000000020000000300000012300a0d7461726765745f746f6b656e73121f0a180200000000000000030000000000000004000000000000001802220104121e0a077765696768747312130a0c0000803f0000803f0000803f1801220103220d63726f73735f656e74726f7079',
  );
  expect(() => decodeForwardBackwardRequest(misshapen)).toThrow(
    /data\[0\]\.loss_fn_inputs\.target_tokens: shape \[4\] holds 4 values, the tensor 3/,
  );
});
