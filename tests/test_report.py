"""The study report: every section with full data, and graceful text with missing data."""
from __future__ import annotations

import json
import os

import numpy as np

from lamb_lars.study import store as st
from lamb_lars.study.regimes import Baseline
from lamb_lars.study.report import Target, write_report

PNG = b"\x89PNG\r\n\x1a\n"


def _curve(b, s_target, *, n=60000, extras=True, sec_per_step=None):
  """Accuracy rising to 0.99 exactly at step s_target; wall time from t(B) = 0.01 + 1e-5·B."""
  sec = sec_per_step or (0.01 + 1e-5 * b)
  rows = []
  for frac in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0):
    step = int(round(frac * s_target))
    row = {"step": step, "epoch": step * b / n, "examples": step * b, "wall_time": 5.0 + sec * step,
           "eval_accuracy": min(0.995, 0.5 + 0.49 * frac), "eval_loss": 1.0 / (1 + 10 * frac),
           "train_loss": 1.0 / (1 + 12 * frac), "lr": 0.1}
    if extras:
      row.update({"dist_from_init": 0.5 * np.log1p(step), "noise_scale": 900.0 + 50 * frac,
                  "trust_ratio/conv1/kernel": 0.01 * (1 + frac), "trust_ratio/fc3/bias": 1.0})
    rows.append(row)
  return rows


def _store(tmp_path):
  con = st.open_store(tmp_path / "study.sqlite")
  for b in (256, 512, 1024, 2048, 4096, 8192):
    s = 1000.0 * (1 + 1024.0 / b)
    for opt, variant, scale in (("sgd", "original", 1.0), ("lars", "original", 1.1), ("sgd", "layerwise", 1.3)):
      rid = f"{opt}-{variant}-{b}"
      st.upsert_run(con, rid, study="mnist", batch_size=b, optimizer=opt, variant=variant,
                    params={"lr_scaling": "linear" if opt == "sgd" and variant == "original" else "sqrt"})
      st.add_evals(con, rid, _curve(b, s * scale))
      st.set_status(con, rid, "done")
  st.upsert_run(con, "div", study="mnist", batch_size=8192, optimizer="adam")
  st.add_evals(con, "div", [{"step": 10, "eval_accuracy": 0.1, "eval_loss": float("nan")}])
  st.set_status(con, "div", "diverged", error="NaN loss")
  st.upsert_run(con, "crash", study="mnist", batch_size=8192, optimizer="adam")
  st.set_status(con, "crash", "failed", error="Traceback ...\nRuntimeError: out of memory")
  return con


def test_full_report(tmp_path):
  _store(tmp_path).close()
  out = tmp_path / "report"
  base = Baseline(batch_size=256, accuracy=0.99, val_loss=0.1, epochs=30, num_train=60000)
  path = write_report(str(tmp_path / "study.sqlite"), out, target=("eval_accuracy", 0.99), baseline=base,
                      study="mnist")
  text = open(path).read()
  for heading in ("## Runs", "## Steps to target", "## Accuracy vs batch size", "## Training curves",
                  "## Distance from initialisation", "## Trust ratios", "## Predicted vs fitted critical batch",
                  "## Regimes", "## Table 3"):
    assert heading in text
  assert "B_crit = 1024" in text  # sgd original is the best at every batch: S = 1000(1 + 1024/B) exactly
  assert "RuntimeError: out of memory" in text and "Time-optimal batch B*" in text
  assert "| sgd | diverge" not in text and "| adam | n/a | diverge |" in text
  pngs = sorted(f for f in os.listdir(out) if f.endswith(".png"))
  assert pngs == ["accuracy_vs_batch.png", "dist_from_init.png", "noise_scale.png", "steps_to_target.png",
                  "training_curves.png", "trust_ratio.png"]
  for f in pngs:
    assert open(out / f, "rb").read(8) == PNG and f"]({f})" in text


def test_empty_store_and_missing_data(tmp_path):
  path = write_report(str(tmp_path / "empty.sqlite"), tmp_path / "r0", target=Target(goal=0.99))
  text = open(path).read()
  assert "No runs in the store." in text and "No runs." in text and "No baseline given" in text
  assert not [f for f in os.listdir(tmp_path / "r0") if f.endswith(".png")]
  # Runs without optional metrics, one batch only reaching the goal, no target: each section says what is missing.
  ts = [st.Trial("a", 256, "sgd", curve=_curve(256, 100, extras=False)),
        st.Trial("b", 512, "sgd", curve=[{"step": 5, "eval_accuracy": 0.3}])]
  text = open(write_report(ts, tmp_path / "r1", target={"metric": "eval_accuracy", "goal": 0.99})).read()
  assert "Fewer than two batch sizes reached the goal" in text
  assert "No run logged `dist_from_init`" in text and "No run logged `trust_ratio/<layer>`" in text
  assert "No run logged `noise_scale`" in text and "No batch size has runs of more than one variant" in text
  text = open(write_report(ts, tmp_path / "r2")).read()
  assert "No target given" in text


def test_report_from_ingested_run_dirs(tmp_path):
  con = st.open_store(tmp_path / "s.sqlite")
  for b in (128, 1024):
    d = tmp_path / f"run{b}"
    d.mkdir()
    rows = _curve(b, 500.0 * (1 + 256.0 / b), extras=False)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "result.json").write_text(json.dumps({"status": "done", "step": rows[-1]["step"], "final": rows[-1]}))
    st.upsert_run(con, f"r{b}", study="x", batch_size=b, optimizer="lamb")
    st.ingest_run_dir(con, f"r{b}", d)
  text = open(write_report(con, tmp_path / "rep", target=Target("eval_accuracy", 0.99))).read()
  assert "B_crit = 256" in text and "steps_to_target.png" in text
