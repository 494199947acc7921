"""Ray Train as a Gaudi user runs it: ``TorchTrainer`` with one HPU per worker and hccl,
whose train loop is an unchanged Transformers ``Trainer`` on a tiny model built from a config,
then (under Ray) a plain torch loop through Ray's ``prepare_model``.

``python ray_trainer_job.py OUT`` runs it with Ray on a one-node cluster it starts;
``... OUT --address HOST:PORT --workers N`` on a running cluster (``ray start`` on each
node), N workers. Every worker writes what it ran on, its losses and a checksum of its
parameters to ``OUT/rank<N>.json``. ``torchrun ... OUT --torchrun`` runs the same train
loop without Ray, as the reference.
"""

import json
import os
import sys
import time

OUT = sys.argv[1]


def train_loop(config=None):
    """The user's loop: nothing in it knows about Gaudi, Ray or the plugin."""
    import torch
    import torch.distributed as dist
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    class Data(torch.utils.data.Dataset):
        """16 fixed sequences, the same on every worker (the sampler shards them)."""

        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.ids = torch.randint(0, 64, (16, 12), generator=g)

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    class Losses(TrainerCallback):
        def __init__(self):
            self.seen = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.seen.append(logs["loss"])

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2,
                                       n_head=2))
    args = TrainingArguments(output_dir=os.path.join(OUT, "trainer"), max_steps=4,
                             per_device_train_batch_size=2, learning_rate=1e-2,
                             logging_steps=1, report_to=[], save_strategy="no",
                             disable_tqdm=True, seed=0)
    losses = Losses()
    Trainer(model=model, args=args, train_dataset=Data(), callbacks=[losses]).train()
    flat = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
    rank = dist.get_rank()
    plain = plain_loop(rank) if config and config.get("ray") else {}
    with open(os.path.join(OUT, f"rank{rank}.json"), "w") as f:
        json.dump({
            "rank": rank, "world": dist.get_world_size(), "backend": dist.get_backend(),
            "device": str(args.device), "param_device": next(model.parameters()).device.type,
            "visible": os.environ.get("HABANA_VISIBLE_MODULES"),
            "module": os.environ.get("HLS_MODULE_ID"), "local_rank": os.environ.get("LOCAL_RANK"),
            "local_world": os.environ.get("LOCAL_WORLD_SIZE"),
            "node_rank": os.environ.get("NODE_RANK") or os.environ.get("GROUP_RANK"),
            "server": os.environ.get("HPU_PLUGIN_EMULATE_MODULES"),
            "losses": losses.seen, "checksum": float(flat.double().sum()), "plain": plain,
        }, f)


def plain_loop(rank):
    """A plain torch loop as Ray Train's guide writes it: ``prepare_model`` (DDP on the
    worker's device) and ``get_device``, different data on each worker."""
    import ray.train.torch
    import torch

    device = ray.train.torch.get_device()
    torch.manual_seed(0)
    net = ray.train.torch.prepare_model(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(rank * 10 + step))
        net(x.to(device)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    flat = torch.cat([p.detach().reshape(-1).cpu() for p in net.parameters()])
    return {"wrapped": type(net).__name__, "device": str(device),
            "param_device": str(next(net.parameters()).device),
            "checksum": float(flat.double().sum())}


def ray_loop(config):
    """The loop under Ray Train, which passes ``train_loop_config`` to a function only when
    it takes one required argument."""
    train_loop(config)


def option(name: str, default: str | None = None) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def with_ray() -> None:
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    start = time.monotonic()
    # A one-machine cluster sized for the 2-core CI machine: no dashboard, a small object
    # store (nothing large goes through it). The workers ask for {"HPU": 1} and no CPU.
    # With --address the cluster is already up, one `ray start` a node.
    address = option("--address")
    if address:
        ray.init(address=address)
    else:
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 1024 * 1024)
    workers = int(option("--workers", "2"))
    deadline = time.monotonic() + 60  # nodes joining a running cluster may still register
    while (hpus := ray.cluster_resources().get("HPU", 0)) < workers and address:
        if time.monotonic() > deadline:
            break
        time.sleep(1)
    nodes = sorted(n["Resources"].get("HPU", 0) for n in ray.nodes() if n["Alive"])
    print(f"ray found HPU: {hpus:g} on {len(nodes)} node(s): {nodes}", flush=True)
    if hpus < workers:
        # Ray Train would wait for the placement group, time out after
        # RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S and retry without end.
        sys.exit(f"Ray found {hpus:g} HPU(s); the job needs {workers}")
    trainer = TorchTrainer(
        ray_loop,
        train_loop_config={"ray": True},
        scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"HPU": 1}),
        torch_config=TorchConfig(backend="hccl"),
        run_config=RunConfig(storage_path=os.path.join(OUT, "ray_results"), name="job"),
    )
    try:
        result = trainer.fit()
    except Exception as exc:  # what a user's driver sees: its type, then Ray's cause chain
        print(f"fit raised {type(exc).__name__}", flush=True)
        raise
    print(f"fit done in {time.monotonic() - start:.1f} s, error={result.error!r}", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    if "--torchrun" in sys.argv:
        train_loop()
    else:
        with_ray()
