"""GPU facts. Placeholder until the GPU issue: reports no GPU backend."""


def main(args):
    return {"backend": "none", "gpus": [], "driver_version": None, "cuda_version": None}
