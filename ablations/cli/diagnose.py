"""``run_ablations.py diagnose``: devices, memory, what this torch supports, Ray's resources
and a suggested command line (ablations/trial/host.py gathers them)."""

from __future__ import annotations

import logging
from typing import Optional

from ablations.cli.console import spoken


def diagnose_main(address: Optional[str]) -> int:
    """``diagnose``: what this machine (and Ray, local or at ``address``) offers, and a
    suggested command."""
    import ray

    from ablations.trial.host import diagnose
    from ablations.experiment.execution.cluster import check_cluster_address

    info = diagnose()
    print(f"python {info['python']}, torch {info['torch']}")
    print(f"CPU: {info['cpu_cores']} cores, RAM {info['ram_available_gib']} GiB available of "
          f"{info['ram_total_gib']} GiB")
    print(f"CPU support: bf16 autocast {info['cpu_bf16_autocast']}, fp16 autocast "
          f"{info['cpu_fp16_autocast']}, fused AdamW {info['cpu_fused_adamw']}, C++ compiler "
          f"for inductor {info['cpp_compiler_for_inductor']}")
    if info["gpus"]:
        for gpu in info["gpus"]:
            bf16 = "native" if gpu["bf16"] else \
                "emulated (slow: use fp16)" if gpu["bf16_emulated"] else "no"
            print(f"GPU {gpu['index']}: {gpu['name']}, {gpu['free_gib']} GiB free of "
                  f"{gpu['total_gib']} GiB, capability {gpu['capability']}, bf16 {bf16}, tf32 "
                  f"{'native' if gpu['tf32'] else 'no (needs capability 8.0)'}")
    else:
        print("GPU: none visible to torch (CUDA available: False)")
    try:
        if address:
            check_cluster_address(address)
            ray.init(address=address, logging_level=logging.WARNING)
        else:  # a private local Ray, as a run starts (execution/runner.py's init_ray)
            ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING)
        resources = ray.cluster_resources()
        print("Ray resources: " + ", ".join(f"{k} {v:g}" for k, v in sorted(resources.items())
                                            if not k.startswith("node:")))
    except (ConnectionError, RuntimeError) as exc:
        print(f"Ray: cannot start or connect ({str(exc).splitlines()[0]})")
    finally:
        ray.shutdown()
    print(f"Suggested: {spoken(info['suggestion'])}")
    return 0
