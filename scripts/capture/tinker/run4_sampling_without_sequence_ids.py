import sys

import tinker
from tinker import types

BASE = f"http://127.0.0.1:{sys.argv[1]}"
sc = tinker.ServiceClient(base_url=BASE, api_key="tml-k")
s = sc.create_sampling_client(base_model="Qwen/Qwen3-8B").result()
try:
    print(s.sample(types.ModelInput.from_ints([1, 2]), 1, types.SamplingParams(max_tokens=2)).result(timeout=20))
except Exception as e:
    print("no sample_sequence_ids ->", type(e).__name__, repr(e)[:200])
sc.close("success").result()
