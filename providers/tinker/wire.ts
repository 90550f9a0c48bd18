import path from 'node:path';
import protobuf from 'protobufjs';
import { ProviderError } from '../errors';

/**
 * The client side of Tinker's protobuf bodies (WIRE.md §5, `tinker_public.proto` beside this file): forward_backward
 * requests out, forward and sample results in. Packed arrays are little-endian: tokens int32, dense tensors float32
 * or int64, result offsets int64 byte offsets.
 */

const root = new protobuf.Root().loadSync(path.join(__dirname, 'tinker_public.proto'), { keepCase: true });
root.resolveAll();
const ForwardBackwardRequest = root.lookupType('tinker_public.ForwardBackwardRequest');
const ForwardBackwardOutput = root.lookupType('tinker_public.ForwardBackwardOutput');
const SampleResponse = root.lookupType('tinker_public.SampleResponse');

const FLOAT32 = 1;
const INT64 = 2;
const INT32 = 3;
const BFLOAT16 = 4;

/** One datum as Tinker takes it: the input tokens, and per-position inputs of the loss. */
export interface TinkerDatum {
  tokens: readonly number[];
  /** `target_tokens` (int64); `weights`, `logprobs`, `advantages` (float32): each one value per input position. */
  targetTokens: readonly number[];
  floats: Record<string, readonly number[]>;
}

function le(values: readonly number[], kind: 'int32' | 'int64' | 'float32'): Buffer {
  const width = kind === 'int64' ? 8 : 4;
  const out = Buffer.alloc(values.length * width);
  values.forEach((v, i) => {
    if (kind === 'float32') out.writeFloatLE(v, i * 4);
    else if (kind === 'int32') out.writeInt32LE(v, i * 4);
    else out.writeBigInt64LE(BigInt(v), i * 8);
  });
  return out;
}

export function encodeForwardBackward(request: {
  modelId: string;
  seqId: number;
  data: readonly TinkerDatum[];
  lossFn: string;
  lossFnConfig?: Record<string, number>;
  forwardOnly?: boolean;
}): Uint8Array {
  const config = request.lossFnConfig ?? {};
  const message = ForwardBackwardRequest.fromObject({
    model_id: request.modelId,
    seq_id: request.seqId,
    loss_fn: request.lossFn,
    ...(request.forwardOnly ? { forward_only: true } : {}), // proto3: a default is not written, as the SDK's encoder does
    loss_fn_config: config,
    // The SDK writes the config twice; a server reading either form gets the same.
    loss_fn_config_v2: Object.fromEntries(Object.entries(config).map(([k, v]) => [k, { number: v }])),
    data: request.data.map((d) => ({
      model_input: [{ encoded_text: { tokens: le(d.tokens, 'int32') } }],
      loss_fn_inputs: {
        target_tokens: { dense: le(d.targetTokens, 'int64'), dtype: INT64, shape: [d.targetTokens.length] },
        ...Object.fromEntries(
          Object.entries(d.floats).map(([name, values]) => [
            name,
            { dense: le(values, 'float32'), dtype: FLOAT32, shape: [values.length] },
          ]),
        ),
      },
    })),
  });
  return ForwardBackwardRequest.encode(message).finish();
}

function bad(what: string): ProviderError {
  return new ProviderError('BAD_RESPONSE', 'non-retryable', `tinker: unexpected ${what}`);
}

/** Values of a packed array, widened to numbers (int32/int64 ids, float32 or bfloat16 values). */
function unpack(bytes: Uint8Array, dtype: number): number[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const width = dtype === INT64 ? 8 : dtype === BFLOAT16 ? 2 : 4;
  if (bytes.byteLength % width !== 0) throw bad(`tensor of ${bytes.byteLength} bytes for dtype ${dtype}`);
  return Array.from({ length: bytes.byteLength / width }, (_v, i) => {
    if (dtype === INT64) return Number(view.getBigInt64(i * 8, true));
    if (dtype === INT32) return view.getInt32(i * 4, true);
    if (dtype === BFLOAT16) return new Float32Array(new Uint32Array([view.getUint16(i * 2, true) << 16]).buffer)[0]!;
    return view.getFloat32(i * 4, true);
  });
}

interface WireOutput {
  loss_fn_output_type?: string;
  loss_fn_outputs?: {
    num_datums?: number;
    fields?: Record<string, { data?: Uint8Array; offsets?: Uint8Array; dtype?: number; trailing_shape?: number[] }>;
  }[];
  metrics?: Record<string, number>;
}

/** A forward or forward-backward result: per datum, each output field's values; and the metrics (`name:reduction`). */
export function decodeForwardBackwardOutput(bytes: Uint8Array): { outputs: Record<string, number[]>[]; metrics: Record<string, number> } {
  let wire: WireOutput;
  try {
    wire = ForwardBackwardOutput.toObject(ForwardBackwardOutput.decode(bytes), { longs: Number }) as WireOutput;
  } catch (err) {
    throw bad(`forward result: ${(err as Error).message}`);
  }
  const outputs: Record<string, number[]>[] = [];
  for (const record of wire.loss_fn_outputs ?? []) {
    const fields = Object.entries(record.fields ?? {});
    const count = record.num_datums ?? 0;
    const rows: Record<string, number[]>[] = Array.from({ length: count }, () => ({}));
    for (const [name, t] of fields) {
      const offsets = unpack(t.offsets ?? new Uint8Array(), INT64);
      if (offsets.length !== count + 1) throw bad(`field ${name}: ${offsets.length} offsets for ${count} datums`);
      const data = t.data ?? new Uint8Array();
      for (let i = 0; i < count; i++) rows[i]![name] = unpack(data.subarray(offsets[i]!, offsets[i + 1]!), t.dtype ?? FLOAT32);
    }
    outputs.push(...rows);
  }
  return { outputs, metrics: wire.metrics ?? {} };
}

interface WireSample {
  sequences?: { stop_reason?: number; tokens?: Uint8Array; logprobs?: Uint8Array }[];
  prompt_logprobs?: Uint8Array;
}

/** A sample result: tokens, their logprobs and why each sequence stopped; prompt logprobs (null where none). */
export function decodeSampleResponse(bytes: Uint8Array): {
  sequences: { tokens: number[]; logprobs: number[]; stopReason: 'stop' | 'length' }[];
  promptLogprobs?: (number | null)[];
} {
  let wire: WireSample;
  try {
    wire = SampleResponse.toObject(SampleResponse.decode(bytes), { longs: Number }) as WireSample;
  } catch (err) {
    throw bad(`sample result: ${(err as Error).message}`);
  }
  return {
    sequences: (wire.sequences ?? []).map((s) => {
      if ((s.stop_reason ?? 0) > 1) throw bad(`stop_reason ${s.stop_reason}`);
      return {
        tokens: unpack(s.tokens ?? new Uint8Array(), INT32),
        logprobs: unpack(s.logprobs ?? new Uint8Array(), FLOAT32),
        stopReason: s.stop_reason === 1 ? 'length' : 'stop',
      };
    }),
    ...(wire.prompt_logprobs ? { promptLogprobs: unpack(wire.prompt_logprobs, FLOAT32).map((v) => (Number.isNaN(v) ? null : v)) } : {}),
  };
}
