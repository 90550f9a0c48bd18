import * as tf from '@tensorflow/tfjs-core';
import type { GradConfig, NamedAttrMap, Tensor } from '@tensorflow/tfjs-core';

/**
 * TF.js's own gradient rules for the kernels the learner and its token losses use, ported from tfjs-core's
 * `src/gradients/*_grad.ts`. tfjs-core's CommonJS bundle ships no gradients: they live only in its ES-module
 * files, which `require` (and jest) cannot load. A kernel that already has a gradient keeps it.
 *
 * A custom TokenLoss may use: add/sub/mul/div/neg, sum/mean, exp/log/sigmoid/tanh/softplus/square/sqrt/rsqrt/abs/pow,
 * maximum/minimum/clipByValue/where, reshape/expandDims/cast/slice/concat. Any other op fails at backward
 * with "gradient function not found for <Kernel>"; add its rule here.
 */
export function registerLearnerGradients(): void {
  for (const config of GRADIENTS) {
    if (!tf.getGradient(config.kernelName)) tf.registerGradient(config);
  }
}

/** Sums a broadcast gradient back down to the shape of the input it came from. */
function unbroadcast(grad: Tensor, input: Tensor, outShape: number[]): Tensor {
  const axes = tf.broadcast_util.getReductionAxes(input.shape, outShape);
  return tf.reshape(axes.length > 0 ? tf.sum(grad, axes) : grad, input.shape);
}

/** A binary elementwise kernel whose gradients w.r.t. each input are computed before unbroadcasting. */
function binary(kernelName: string, derivatives: (dy: Tensor, a: Tensor, b: Tensor) => [() => Tensor, () => Tensor]): GradConfig {
  return {
    kernelName,
    inputsToSave: ['a', 'b'],
    gradFunc: (dy, [a, b]) => {
      const outShape = tf.broadcast_util.assertAndGetBroadcastShape(a.shape, b.shape);
      const [derA, derB] = derivatives(dy as Tensor, a, b);
      return { a: () => unbroadcast(derA(), a, outShape), b: () => unbroadcast(derB(), b, outShape) };
    },
  };
}

/** A unary kernel with gradient dy·f(x, y), x its input and y its output. */
function unary(kernelName: string, derivative: (dy: Tensor, x: Tensor, y: Tensor) => Tensor): GradConfig {
  return {
    kernelName,
    inputsToSave: ['x'],
    outputsToSave: [true],
    gradFunc: (dy, [x, y]) => ({ x: () => derivative(dy as Tensor, x, y) }),
  };
}

/** The gradient of a reduction over `axis`, spread back over the input's shape. */
function spread(dy: Tensor, x: Tensor, attrs: NamedAttrMap): Tensor {
  const axes = tf.util.parseAxisParam(attrs.axis as number | number[], x.shape);
  const keptShape = x.shape.map((size, i) => (axes.includes(i) ? 1 : size));
  return tf.mul(tf.reshape(dy, keptShape), tf.ones(x.shape));
}

const f32 = (t: Tensor) => tf.cast(t, 'float32');

const GRADIENTS: GradConfig[] = [
  binary('Add', (dy) => [() => dy, () => dy]),
  binary('Sub', (dy) => [() => dy, () => tf.neg(dy)]),
  binary('Multiply', (dy, a, b) => [() => tf.mul(dy, f32(b)), () => tf.mul(dy, f32(a))]),
  binary('RealDiv', (dy, a, b) => [() => tf.div(dy, f32(b)), () => tf.neg(tf.div(tf.mul(dy, f32(a)), tf.square(f32(b))))]),
  binary('Maximum', (dy, a, b) => [() => tf.mul(dy, f32(tf.greaterEqual(a, b))), () => tf.mul(dy, f32(tf.less(a, b)))]),
  binary('Minimum', (dy, a, b) => [() => tf.mul(dy, f32(tf.lessEqual(a, b))), () => tf.mul(dy, f32(tf.greater(a, b)))]),
  binary('Pow', (dy, a, b) => [
    () => tf.mul(dy, tf.mul(f32(b), tf.pow(a, tf.sub(f32(b), 1)))),
    () => tf.mul(dy, tf.mul(tf.pow(a, b), tf.where(tf.greater(a, 0), tf.log(a), tf.zerosLike(a)))),
  ]),
  unary('Neg', (dy) => tf.neg(dy)),
  unary('Exp', (dy, _x, y) => tf.mul(dy, y)),
  unary('Log', (dy, x) => tf.div(dy, f32(x))),
  unary('Sigmoid', (dy, _x, y) => tf.mul(dy, tf.mul(y, tf.sub(1, y)))),
  unary('Tanh', (dy, _x, y) => tf.mul(dy, tf.sub(1, tf.square(y)))),
  unary('Softplus', (dy, x) => tf.mul(dy, tf.sigmoid(x))),
  unary('Square', (dy, x) => tf.mul(dy, tf.mul(f32(x), 2))),
  unary('Sqrt', (dy, _x, y) => tf.div(dy, tf.mul(y, 2))),
  unary('Rsqrt', (dy, _x, y) => tf.mul(dy, tf.mul(tf.pow(y, 3), -0.5))),
  unary('Abs', (dy, x) => tf.mul(dy, tf.step(f32(x), -1))),
  unary('Cast', (dy) => tf.clone(dy)),
  unary('Identity', (dy) => f32(dy)),
  {
    kernelName: 'AddN',
    saveAllInputs: true,
    gradFunc: (dy, saved) => Object.fromEntries(saved.map((_, i) => [i, () => tf.clone(dy as Tensor)])),
  },
  { kernelName: 'Sum', inputsToSave: ['x'], gradFunc: (dy, [x], attrs) => ({ x: () => spread(dy as Tensor, x, attrs) }) },
  {
    kernelName: 'Mean',
    inputsToSave: ['x'],
    gradFunc: (dy, [x], attrs) => ({ x: () => tf.div(spread(dy as Tensor, x, attrs), x.size / (dy as Tensor).size) }),
  },
  {
    kernelName: 'ClipByValue',
    inputsToSave: ['x'],
    gradFunc: (dy, [x], attrs) => {
      const inside = tf.logicalAnd(tf.greaterEqual(x, attrs.clipValueMin as number), tf.lessEqual(x, attrs.clipValueMax as number));
      return { x: () => tf.where(inside, dy as Tensor, tf.zerosLike(dy as Tensor)) };
    },
  },
  {
    kernelName: 'Select',
    inputsToSave: ['condition'],
    gradFunc: (dy, [condition]) => ({
      condition: () => f32(tf.zerosLike(condition)),
      t: () => tf.mul(dy as Tensor, f32(condition)),
      e: () => tf.mul(dy as Tensor, f32(tf.logicalNot(condition))),
    }),
  },
  { kernelName: 'Reshape', inputsToSave: ['x'], gradFunc: (dy, [x]) => ({ x: () => tf.reshape(dy as Tensor, x.shape) }) },
  {
    kernelName: 'ExpandDims',
    inputsToSave: ['input'],
    gradFunc: (dy, [input]) => ({ input: () => tf.reshape(dy as Tensor, input.shape) }),
  },
  {
    kernelName: 'Slice',
    inputsToSave: ['x'],
    gradFunc: (dy, [x], attrs) => {
      const [begin, size] = tf.slice_util.parseSliceParams(x, attrs.begin as number[], attrs.size as number[]);
      return {
        x: () =>
          tf.pad(
            dy as Tensor,
            x.shape.map((extent, i) => [begin[i], extent - begin[i] - size[i]] as [number, number]),
          ),
      };
    },
  },
  {
    kernelName: 'Concat',
    saveAllInputs: true,
    gradFunc: (dy, saved, attrs) => {
      const axis = tf.util.parseAxisParam(attrs.axis as number, saved[0].shape)[0];
      const parts = tf.split(
        dy as Tensor,
        saved.map((t) => t.shape[axis]),
        axis,
      );
      return Object.fromEntries(parts.map((part, i) => [i, () => part]));
    },
  },
];
