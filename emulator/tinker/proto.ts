import protobuf from 'protobufjs';
import { badRequest } from '../errors';
import { TINKER_PROTO } from './schema';

/**
 * The protobuf bodies of Tinker's wire (providers/tinker/WIRE.md §5): `forward_backward` requests in, forward and
 * sample results out. Packed arrays are little-endian: tokens int32, dense tensors float32 or int64, CSR indices int64.
 */

const root = protobuf.parse(TINKER_PROTO, { keepCase: true }).root;
const ForwardBackwardRequestType = root.lookupType('tinker_public.ForwardBackwardRequest');
const ForwardBackwardOutputType = root.lookupType('tinker_public.ForwardBackwardOutput');
const SampleResponseType = root.lookupType('tinker_public.SampleResponse');

const DTYPE = { FLOAT32: 1, INT64: 2, INT32: 3, BFLOAT16: 4 } as const;

export interface TensorValue {
  dtype: 'float32' | 'int64';
  shape: number[];
  /** Row-major, dense (a CSR tensor is expanded). */
  data: number[];
}

export interface ForwardBackwardDatum {
  /** The model input: its encoded-text chunks' tokens, concatenated. */
  tokens: number[];
  lossFnInputs: Record<string, TensorValue>;
}

export interface ForwardBackwardRequest {
  modelId: string;
  seqId: number;
  data: ForwardBackwardDatum[];
  lossFn: string;
  /** `loss_fn_config`, with `loss_fn_config_v2`'s numbers where the SDK sent both. */
  lossFnConfig: Record<string, number>;
  forwardOnly: boolean;
}

interface WireTensor {
  dense?: Uint8Array;
  sparse_csr?: { values?: Uint8Array; crow_indices?: Uint8Array; col_indices?: Uint8Array };
  dtype?: number;
  shape?: number[];
}

interface WireRequest {
  model_id?: string;
  seq_id?: number;
  data?: {
    model_input?: { encoded_text?: { tokens?: Uint8Array }; image?: unknown; dmel?: unknown }[];
    loss_fn_inputs?: Record<string, WireTensor>;
  }[];
  loss_fn?: string;
  loss_fn_config?: Record<string, number>;
  loss_fn_config_v2?: Record<string, { number?: number; text?: string }>;
  forward_only?: boolean;
}

/** Little-endian arrays out of a `bytes` field (copied: protobuf's slices need not be aligned). */
function int32s(bytes: Uint8Array | undefined, where: string): number[] {
  if (!bytes || bytes.length === 0) return [];
  if (bytes.length % 4 !== 0) throw badRequest(`${where}: ${bytes.length} bytes is not a whole number of int32 values`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return Array.from({ length: bytes.length / 4 }, (_v, i) => view.getInt32(i * 4, true));
}

function int64s(bytes: Uint8Array | undefined, where: string): number[] {
  if (!bytes || bytes.length === 0) return [];
  if (bytes.length % 8 !== 0) throw badRequest(`${where}: ${bytes.length} bytes is not a whole number of int64 values`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return Array.from({ length: bytes.length / 8 }, (_v, i) => Number(view.getBigInt64(i * 8, true)));
}

function float32s(bytes: Uint8Array | undefined, where: string): number[] {
  if (!bytes || bytes.length === 0) return [];
  if (bytes.length % 4 !== 0) throw badRequest(`${where}: ${bytes.length} bytes is not a whole number of float32 values`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return Array.from({ length: bytes.length / 4 }, (_v, i) => view.getFloat32(i * 4, true));
}

function tensor(t: WireTensor, where: string): TensorValue {
  const dtype = t.dtype === DTYPE.FLOAT32 ? 'float32' : t.dtype === DTYPE.INT64 ? 'int64' : undefined;
  if (!dtype) throw badRequest(`${where}: dtype ${t.dtype ?? 'unset'} is not FLOAT32 or INT64`);
  const values = (bytes: Uint8Array | undefined) => (dtype === 'float32' ? float32s(bytes, where) : int64s(bytes, where));
  const shape = (t.shape ?? []).map(Number);
  if (t.sparse_csr) {
    if (shape.length !== 2) throw badRequest(`${where}: a CSR tensor needs a 2-D shape, got [${shape.join(', ')}]`);
    const [rows, cols] = shape as [number, number];
    const nonZero = values(t.sparse_csr.values);
    const crow = int64s(t.sparse_csr.crow_indices, `${where}.crow_indices`);
    const col = int64s(t.sparse_csr.col_indices, `${where}.col_indices`);
    if (crow.length !== rows + 1 || col.length !== nonZero.length || crow[rows] !== nonZero.length)
      throw badRequest(`${where}: inconsistent CSR tensor (${rows} rows, ${crow.length} row pointers, ${nonZero.length} values)`);
    const data = new Array<number>(rows * cols).fill(0);
    for (let r = 0; r < rows; r++)
      for (let k = crow[r]!; k < crow[r + 1]!; k++) {
        if (col[k]! < 0 || col[k]! >= cols) throw badRequest(`${where}: column ${col[k]} outside ${cols}`);
        data[r * cols + col[k]!] = nonZero[k]!;
      }
    return { dtype, shape, data };
  }
  const data = values(t.dense);
  const expected = shape.length ? shape.reduce((a, d) => a * d, 1) : data.length;
  if (expected !== data.length)
    throw badRequest(`${where}: shape [${shape.join(', ')}] holds ${expected} values, the tensor ${data.length}`);
  return { dtype, shape: shape.length ? shape : [data.length], data };
}

/** A `POST /api/v1/forward_backward` body (`application/x-protobuf`). */
export function decodeForwardBackwardRequest(bytes: Uint8Array): ForwardBackwardRequest {
  let wire: WireRequest;
  try {
    wire = ForwardBackwardRequestType.toObject(ForwardBackwardRequestType.decode(bytes), { longs: Number, defaults: false }) as WireRequest;
  } catch (err) {
    throw badRequest(`forward_backward: not a ForwardBackwardRequest protobuf: ${(err as Error).message}`);
  }
  const data = (wire.data ?? []).map((d, i) => {
    const tokens: number[] = [];
    for (const [c, chunk] of (d.model_input ?? []).entries()) {
      if (!chunk.encoded_text) throw badRequest(`data[${i}].model_input[${c}]: only encoded_text chunks are supported by this model`);
      tokens.push(...int32s(chunk.encoded_text.tokens, `data[${i}].model_input[${c}].tokens`));
    }
    const lossFnInputs = Object.fromEntries(
      Object.entries(d.loss_fn_inputs ?? {}).map(([name, t]) => [name, tensor(t, `data[${i}].loss_fn_inputs.${name}`)]),
    );
    return { tokens, lossFnInputs };
  });
  const lossFnConfig: Record<string, number> = { ...(wire.loss_fn_config ?? {}) };
  for (const [k, v] of Object.entries(wire.loss_fn_config_v2 ?? {})) if (typeof v.number === 'number') lossFnConfig[k] = v.number;
  return {
    modelId: wire.model_id ?? '',
    seqId: wire.seq_id ?? 0,
    data,
    lossFn: wire.loss_fn ?? '',
    lossFnConfig,
    forwardOnly: wire.forward_only ?? false,
  };
}

function littleEndian(values: readonly number[], kind: 'float32' | 'int32' | 'int64'): Buffer {
  const width = kind === 'int64' ? 8 : 4;
  const out = Buffer.alloc(values.length * width);
  values.forEach((v, i) => {
    if (kind === 'float32') out.writeFloatLE(v, i * 4);
    else if (kind === 'int32') out.writeInt32LE(v, i * 4);
    else out.writeBigInt64LE(BigInt(v), i * 8);
  });
  return out;
}

/**
 * A forward or forward-backward result: one `ArrayRecord` holding every datum, each field a float32
 * `BatchedTensor` (values concatenated, byte offsets as int64, one per datum plus the end). Metric keys are
 * `name:reduction`, as the SDK's merge requires.
 */
export function encodeForwardBackwardOutput(result: {
  outputs: Record<string, readonly number[]>[];
  metrics: Record<string, number>;
  /** `ArrayRecord` (hosted Tinker's) unless told (SkyRL's: `scalar`). */
  outputType?: string;
}): Uint8Array {
  for (const key of Object.keys(result.metrics))
    if (key.split(':').length !== 2) throw new Error(`metric '${key}' is not name:reduction (the SDK's merge splits on one ':')`);
  const names = result.outputs.length ? Object.keys(result.outputs[0]!) : [];
  const fields: Record<string, unknown> = {};
  for (const name of names) {
    const offsets = [0];
    const parts = result.outputs.map((o, i) => {
      const values = o[name];
      if (!values) throw new Error(`datum ${i} has no '${name}' output`);
      const bytes = littleEndian(values, 'float32');
      offsets.push(offsets[offsets.length - 1]! + bytes.length);
      return bytes;
    });
    fields[name] = { data: Buffer.concat(parts), offsets: littleEndian(offsets, 'int64'), dtype: DTYPE.FLOAT32 };
  }
  const message = ForwardBackwardOutputType.fromObject({
    loss_fn_output_type: result.outputType ?? 'ArrayRecord',
    loss_fn_outputs: [{ fields, num_datums: result.outputs.length }],
    metrics: result.metrics,
  });
  return ForwardBackwardOutputType.encode(message).finish();
}

export interface SampledSequenceValue {
  tokens: readonly number[];
  logprobs?: readonly number[];
  stopReason: 'stop' | 'length';
}

/** A sample result: int32 tokens and float32 logprobs per sequence; prompt logprobs with NaN where there is none. */
export function encodeSampleResponse(result: {
  sequences: SampledSequenceValue[];
  promptLogprobs?: readonly (number | null)[];
}): Uint8Array {
  const message = SampleResponseType.fromObject({
    sequences: result.sequences.map((s) => ({
      stop_reason: s.stopReason === 'length' ? 1 : 0,
      tokens: littleEndian(s.tokens, 'int32'),
      ...(s.logprobs ? { logprobs: littleEndian(s.logprobs, 'float32') } : {}),
    })),
    ...(result.promptLogprobs
      ? {
          prompt_logprobs: littleEndian(
            result.promptLogprobs.map((v) => v ?? NaN),
            'float32',
          ),
        }
      : {}),
  });
  return SampleResponseType.encode(message).finish();
}
