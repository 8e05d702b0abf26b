"""The model a backend computes: the LLaMA decoder (llama.py), its KV layer over rBlocks (kv_layer.py), the device-time stand-in (device_time.py)."""
