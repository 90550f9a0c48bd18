"""Run 2: server flags on (zstd, small chunks, retrieve_futures poller, join_sampling_session)."""

import logging
import pickle
import sys
import time

import tinker
from tinker import types

PORT = int(sys.argv[1])
BASE = f"http://127.0.0.1:{PORT}"
logging.basicConfig(level=logging.WARNING, format="CLIENT %(levelname)s %(name)s: %(message)s")


def datum(tokens):
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )


sc = tinker.ServiceClient(base_url=BASE, api_key="tml-capture-test-key")
tc = sc.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=4).result()
r = tc.forward_backward(
    [datum([1, 2, 3]), datum([4, 5, 6]), datum([7, 8, 9, 10]), datum([11, 12])], "cross_entropy"
).result()
print("chunked fwdbwd metrics", r.metrics, "n", len(r.loss_fn_outputs), [o["logprobs"].data for o in r.loss_fn_outputs])
s = tc.save_weights_and_get_sampling_client().result()
p = types.ModelInput.from_ints([1, 2, 3])
print("sample (410 then retry):", s.sample(p, 1, types.SamplingParams(max_tokens=2)).result().sequences[0].tokens)
futs = [s.sample(p, 1, types.SamplingParams(max_tokens=2)) for _ in range(3)]
print("3 concurrent:", [f.result().sequences[0].sequence_id for f in futs])
clone = pickle.loads(pickle.dumps(s))
print("clone sample:", clone.sample(p, 1, types.SamplingParams(max_tokens=2)).result().sequences[0].sequence_id)
time.sleep(0.5)
sc.close("errored", detail="run2").result()
print("done")
