"""The jobs of a run that load a model of their own besides training (:mod:`scd.pipeline.run`
hands them over): what an arm costs -- the KL divergence from the base model on neutral prompts,
lm-evaluation-harness scores -- the steer arm's vector, layer and scale, and the erase arm's
eraser and layers."""

from __future__ import annotations

from functools import partial

from scd.eval import erasure
from scd.eval.steering import INFO, VECTORS
from scd.models import model_fingerprint
from scd.pipeline.jobs import CapabilityJob, EraseJob, SteerJob
from scd.pipeline.run_interface import JobRunner

__all__ = ["capability", "erase", "steer"]


def capability(run: JobRunner, job: CapabilityJob) -> None:
    """The arm's KL divergence from the base model on neutral prompts (``kl/``) and, when the
    recipe lists tasks, lm-evaluation-harness's scores (``lm_eval/``); ``summary.json``
    holds both."""
    import torch

    from scd.eval.capability import kl_from_base, lm_eval_scores
    from scd.io import write_json

    c, e = run.recipe.capability, run.engine
    cuda = torch.cuda.is_available
    adapter = str(job.adapter) if job.adapter else None
    device = getattr(e, "device", None)  # the hf engine's (KL runs on transformers)
    where = {
        "adapter": adapter,
        "system_prompt": job.system_prompt,
        **({"steer": str(job.steer)} if job.steer else {}),
        **({"erase": str(job.erase)} if job.erase else {}),
        "device": device,
        "dtype": e.dtype,
        "batch_size": c.batch_size,
    }

    def work() -> None:
        kl = kl_from_base(
            run.model,
            job.out / "kl",
            prompts=c.neutral_prompts,
            progress=run.progress,
            **where,
        )
        scores = None
        if c.lm_eval_tasks:
            scores = lm_eval_scores(
                run.model,
                job.out / "lm_eval",
                tasks=list(c.lm_eval_tasks),
                include_path=c.lm_eval_include_path,
                limit=c.lm_eval_limit,
                **{k: v for k, v in where.items() if k not in ("steer", "erase", "device")},
                device=device or ("cuda" if cuda() else "cpu"),
            )
        write_json(job.out / "summary.json", {"kind": "capability", "kl": kl, "lm_eval": scores})

    run.stage(job.stage, [job.out / "summary.json"], work, section="capability")


def steer(run: JobRunner, job: SteerJob) -> None:
    """The steer arm's steering directory (``vector/``): its vectors from the setting's training
    rows, the layer and scale chosen on its validation prompts."""
    from scd.eval.steering_search import search_steering

    a, sources = run.recipe.arena, [p for p in (run.prompts, run.eval_prompts) if p]
    t = run.recipe.train
    work = partial(
        search_steering,
        run.model,
        job.sft,
        sources,
        job.out,
        fingerprint=model_fingerprint(run.model),
        layers=a.steer_layers,
        scales=a.steer_scales,
        max_kl=a.steer_max_kl,
        engine_options=run.engine,
        positions=a.steer_positions,
        validation=(t.eval_prompts, t.seed),  # the prompts train.select: best chooses on
        neutral_prompts=run.recipe.capability.neutral_prompts,
    )
    # whole only with its vectors: a directory without them (weights left behind by a copy of
    # the results) is searched again, every grid point read back from the search's curve
    outputs = [job.out / INFO, job.out / VECTORS]
    run.stage(job.stage, outputs, work, section="arena")


def erase(run: JobRunner, job: EraseJob) -> None:
    """The erase arm's eraser directory (``eraser/``): its erasers fitted on the setting's
    training prompts and their baselines, the layers chosen on its validation prompts."""
    from scd.eval.erasure_search import search_erasure

    a, sources = run.recipe.arena, [p for p in (run.prompts, run.eval_prompts) if p]
    t = run.recipe.train
    work = partial(
        search_erasure,
        run.model,
        job.sft,
        sources,
        job.out,
        fingerprint=model_fingerprint(run.model),
        layers=a.erase_layers,
        max_kl=a.erase_max_kl,
        engine_options=run.engine,
        concept=a.erase_concept,
        validation=(t.eval_prompts, t.seed),
        neutral_prompts=run.recipe.capability.neutral_prompts,
    )
    outputs = [job.out / erasure.INFO, job.out / erasure.ERASERS]  # whole only with its erasers
    run.stage(job.stage, outputs, work, section="arena")
