"""Evaluation: the engines that score a model (hf, vllm, a served OpenAI-style API) behind one
interface; the benchmarks run through them (bias on the contact templates, BBQ, the judgment
controls, CrowS-Pairs, WinoBias, Winogender, the stigma probes), their statistics and tables;
capability measures (KL from the base model, lm-eval); the interventions applied at inference
(steering vectors, concept erasers)."""
