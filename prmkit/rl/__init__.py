"""Process rewards for reinforcement learning.

``rewards.py`` scores completions (outcome, PRM, or both) and is TRL's reward function;
``verl.py`` is verl's ``compute_score``; ``shaping.py`` puts step rewards on the policy's
step-end tokens for PPO-style trainers (raw, delta, min-form); ``advantage.py`` makes group
advantages from step scores (DeepSeekMath's process supervision, step-local);
``diagnostics.py`` logs the signs of reward hacking; ``grpo.py`` is the GRPO recipe behind
``prmkit rl``, with its per-step advantages inside TRL's trainer in ``steptrainer.py``. None of
these import an RL library at module level: TRL is needed only to run ``prmkit rl``
(``pip install 'prmkit[rl]'``).
"""
