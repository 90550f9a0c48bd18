import sys

import tinker

PORT = int(sys.argv[1])
BASE = f"http://127.0.0.1:{PORT}"
try:
    tinker.ServiceClient(base_url=BASE, api_key="sk-not-tinker").create_lora_training_client(base_model="x")
except Exception as e:
    print("bad key ->", type(e).__name__, e)
sc = tinker.ServiceClient(base_url=BASE, api_key="tml-k")
tc = sc.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=4).result()
tok = tc.get_tokenizer()
print("tokenizer from local tokenizer_id:", type(tok).__name__, tok.encode("hello world"))
caps = tinker.RestClient(base_url=BASE, api_key="tml-k").get_server_capabilities().result()
print("caps", caps)
sc.close("success").result()
