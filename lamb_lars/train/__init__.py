"""Training one config: ``trainer.train_and_evaluate(config, workdir)`` and the parts it composes.

trainer        ``train_and_evaluate`` (flax examples style): resumable, study-friendly
loop           chunks dispatched one ahead, metrics fetched one chunk late (host/device overlap)
train_step     pure train and eval steps, data-parallel over a mesh
parallel       the strategy: jit over the mesh or ``pmap``, the one module with pmap's specifics
validate       the one validator: everything rejected before anything compiles
run_plan       the decided run: batch, devices, micro-batches, BN groups, durations
batch_schedule batch-size schedules; adaptive_batch: the batch from the measured noise scale (a controller)
durations      every duration of a run in steps, through one rule
feeders        how a chunk of steps gets its batches, per data placement; prefetch to the devices
mesh           the device mesh, multi-host start-up, host data onto devices
evaluation     exact evaluation (pad + mask) on test and validation splits
train_metrics  training metrics between evaluations; noise_scale: the gradient noise scales (simple, preconditioned)
per_example    the per-example cross-check of the noise scale (vmap; small models)
stopping       targets, dead runs, non-finite losses
checkpoint     orbax checkpoints with fallback; run_identity: a workdir belongs to one config
metric_writers metrics.jsonl, TensorBoard (with HParams); progress: bars and log lines
"""
