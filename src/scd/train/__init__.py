"""Training: a recipe's training spec -> TRL's trainer of each method (SFT, DPO, KTO, or one
registered) + PEFT LoRA (+ bitsandbytes 4-bit), the arena's arms and their rows, bias and judgment
measured while training, W&B, merge."""
