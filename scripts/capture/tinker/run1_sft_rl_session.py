"""Drive the official tinker 0.38.0 SDK against the capture server."""

import logging
import sys
import time

import tinker
from tinker import types

PORT = int(sys.argv[1])
BASE = f"http://127.0.0.1:{PORT}/services/tinker-prod"
logging.basicConfig(level=logging.WARNING, format="CLIENT %(levelname)s %(name)s: %(message)s")

T0 = time.time()


def step(msg):
    print(f"[{time.time() - T0:6.2f}] {msg}", flush=True)


def datum(tokens, **extra):
    inp, tgt = tokens[:-1], tokens[1:]
    lfi = {"target_tokens": tgt, "weights": [0.0] + [1.0] * (len(tgt) - 1)}
    lfi.update(extra)
    return types.Datum(model_input=types.ModelInput.from_ints(inp), loss_fn_inputs=lfi)


step("ServiceClient()")
sc = tinker.ServiceClient(base_url=BASE, api_key="tml-capture-test-key")
step("create_lora_training_client")
tc = sc.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=8).result()
step(f"model_id={tc.model_id} info={tc.get_info()}")

# pipelined SFT loop: submit batch k+1 before awaiting batch k
batches = [[datum([1, 2, 3, 4, 5]), datum([6, 7, 8])], [datum([9, 10, 11, 12])]]
adam = types.AdamParams(learning_rate=1e-4)
pending = []
for b in batches:
    fb = tc.forward_backward(b, "cross_entropy")
    op = tc.optim_step(adam)
    pending.append((fb, op))
for fb, op in pending:
    r = fb.result()
    o = op.result()
    step(
        f"fwdbwd metrics={r.metrics} n_out={len(r.loss_fn_outputs)} "
        f"lp0={r.loss_fn_outputs[0]['logprobs'].data} optim={o}"
    )

fwd = tc.forward([datum([1, 2, 3])], "cross_entropy").result()
step(f"forward metrics={fwd.metrics}")

saved = tc.save_state("step2", ttl_seconds=7200).result()
step(f"save_state -> {saved.path}")

# deprecated in-place load (legacy addressing)
ld = tc.load_state_with_optimizer(saved.path).result()
step(f"load_state_with_optimizer (legacy) -> {ld}")

sc2 = tinker.ServiceClient(base_url=BASE, api_key="tml-capture-test-key")
tc2 = sc2.create_training_client_from_state_with_optimizer(saved.path).result()
step(f"create_training_client_from_state_with_optimizer -> {tc2.model_id}")

sampler = tc.save_weights_and_get_sampling_client().result()
step("save_weights_and_get_sampling_client ok")
prompt = types.ModelInput.from_ints([1, 2, 3, 4])
res = sampler.sample(
    prompt,
    num_samples=2,
    sampling_params=types.SamplingParams(max_tokens=3, temperature=1.0),
    include_prompt_logprobs=True,
).result()
for s in res.sequences:
    step(f"seq id={s.sequence_id} stop={s.stop_reason} tokens={s.tokens} lp={s.logprobs}")
step(f"prompt_logprobs={res.prompt_logprobs}")
step(f"compute_logprobs={sampler.compute_logprobs(prompt).result()}")

# RL losses
rl = [datum([1, 2, 3, 4], logprobs=[-1.0, -1.0, -1.0], advantages=[0.5, 0.5, 0.5])]
for d in rl:
    d.loss_fn_inputs.pop("weights", None)
r_is = tc.forward_backward(rl, "importance_sampling").result()
step(f"importance_sampling metrics={r_is.metrics}")
r_ppo = tc.forward_backward(rl, "ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}).result()
step(f"ppo metrics={r_ppo.metrics}")
tc.optim_step(adam).result()

named = tc.save_weights_for_sampler("s1").result()
step(f"save_weights_for_sampler named -> {named.path}")
sampler2 = sc.create_sampling_client(model_path=named.path).result()
step(f"create_sampling_client(model_path) base={sampler2.get_base_model()}")
sampler3 = sc.create_sampling_client(base_model="Qwen/Qwen3-8B").result()
r3 = sampler3.sample(prompt, 1, types.SamplingParams(max_tokens=2)).result()
step(f"base sampler tokens={r3.sequences[0].tokens}")

try:
    tc.forward_backward(rl, "dro").result()
except Exception as e:
    step(f"dro failure -> {type(e).__name__}: {str(e)[:120]}")

step("sleep 11s to see a heartbeat")
time.sleep(11)
sc2.close("success").result()
sc.close("success", detail="capture done").result()
step("closed")
