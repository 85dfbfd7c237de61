"""What tuning cost a model: capability retention of one arm (base, base + system prompt, LoRA).

**Drift on neutral text** (:func:`kl_from_base`). Each item of a neutral prompt set (instructions
naming no social group, each with a reference reply; default: the packaged
``neutral_prompts.yaml``) is formatted by scd's :class:`~scd.models.formatting.Formatter`, so the
text is what scd scores and trains. The reference reply is teacher-forced after the base prompt
(no system prompt) and after the arm's prompt (its system prompt, if any). Reply tokens are all
the chat template renders after the prompt when the reply is the assistant's turn -- the reply
and the template's end-of-turn (``</s>``, ``<|eot_id|>``, ``<|im_end|>\\n``), the tokens training
puts its loss on -- taken once from the base rendering, so both sequences end in the same ids.
At every reply position, D_KL(p_arm || p_base) over the full vocabulary (float32); its mean over
the reply is one value per prompt, reported as a mean over prompts with a 95% percentile
bootstrap interval over prompts; also the reply's mean log-likelihood (nats/token) under arm and
base, and their difference. The base distribution is the same model with its adapter switched
off (PEFT's ``disable_adapter``, no second copy); the base arm is measured like every other
(both passes), and comes out 0.0 exactly.

**Benchmarks** (:func:`lm_eval_scores`): lm-evaluation-harness scores the arm with its own HF
model (the adapter unmerged, the system prompt as its system instruction, the chat template when
the tokenizer has one).

Both stages are resumable: an output directory holding a finished result of the same
configuration returns it without loading the model; one of another configuration is refused.
"""

from scd.eval.capability.kl import KIND_KL, kl_from_base, kl_in_memory
from scd.eval.capability.lm_eval import KIND_LM_EVAL, lm_eval_scores
from scd.eval.capability.neutral import NEUTRAL_PROMPTS, load_neutral_prompts

__all__ = [
    "KIND_KL",
    "KIND_LM_EVAL",
    "NEUTRAL_PROMPTS",
    "kl_from_base",
    "kl_in_memory",
    "lm_eval_scores",
    "load_neutral_prompts",
]
