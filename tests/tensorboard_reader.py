"""Reads a logdir the way TensorBoard's HParams dashboard does, with tensorboard's own code (its event multiplexer,
data provider and hparams backend), so tests check what a user will see, not what our writer meant to write."""

from __future__ import annotations


def hparams_sessions(logdir: str) -> tuple[dict, dict]:
  """(experiment ``{hparams: [names], metrics: [tags]}``, ``{session run: {hparams, metrics, status}}``)."""
  from tensorboard import context
  from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
  from tensorboard.plugins import base_plugin
  from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups

  mux = plugin_event_multiplexer.EventMultiplexer()
  mux.AddRunsFromDirectory(logdir)
  mux.Reload()
  provider = data_provider.MultiplexerDataProvider(mux, logdir)
  backend = backend_context.Context(base_plugin.TBContext(data_provider=provider, multiplexer=mux, logdir=logdir))
  ctx = context.RequestContext()
  experiment = backend.experiment_from_metadata(
    ctx, "", True, backend.hparams_metadata(ctx, ""), backend.hparams_from_data_provider(ctx, "", None)
  )
  statuses = [api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE, api_pb2.STATUS_RUNNING]
  request = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=10_000, allowed_statuses=statuses)
  response = list_session_groups.Handler(ctx, backend, "", request).run()
  sessions = {}
  for group in response.session_groups:
    hparams = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in group.hparams.items()}
    for s in group.sessions:
      sessions[s.name] = {
        "hparams": hparams,
        "status": api_pb2.Status.Name(s.status),
        "metrics": {m.name.tag: m.value for m in s.metric_values},
      }
  exp = {"hparams": [h.name for h in experiment.hparam_infos], "metrics": [m.name.tag for m in experiment.metric_infos]}
  return exp, sessions
