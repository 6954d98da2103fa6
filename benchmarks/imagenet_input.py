"""ImageNet host input throughput per core: our grain pipeline against torchvision + a torch DataLoader, same JPEGs,
same cores, one run.

  nice -n 10 python benchmarks/imagenet_input.py                      # 2,000 images, 1 and 2 cores
  python benchmarks/imagenet_input.py --images=4000 --cores=1,2,4,8 --peer_python=/path/to/venv/bin/python

1. Builds (once, cached in ``--data_dir``) a synthetic ImageNet: ``--images`` ImageNet-sized JPEGs (500×375,
   375×500 and 500×333; smooth random colour fields plus grain noise, quality 90, ≈ 110 KB each like ImageNet's
   average) written by a tfds builder in the very layout of a prepared ``imagenet2012`` (``5.1.0``, ArrayRecord,
   ``image``/``label``/``file_name`` features; no TensorFlow, no download), and the same JPEG bytes as files in an
   ImageFolder tree (``jpeg/train/<class>/<name>.JPEG``) for the peer.
2. Runs, each in a fresh process pinned (``sched_setaffinity``) to the first k cores, over one epoch:
   * ours: ``lamb_lars.input_pipeline.imagenet.train_batches`` (tfds data source → decode → Inception random-resized
     crop, bicubic to 224² → flip → uint8 batch; normalisation runs on the device), with grain threads in one
     process (``grain_workers=0``, the default) and with k grain worker processes (``grain_workers=k``);
   * ours with OpenCV decoding (tfds decodes with OpenCV when ``cv2`` imports, else PIL): ``--cv2_path`` is a folder
     with ``opencv-python-headless`` installed (``pip install --target DIR``), put first on the child's path;
   * the peer (``--peer_python``, a Python with torch + torchvision): ``ImageFolder`` + ``RandomResizedCrop(224,
     bicubic)`` + ``RandomHorizontalFlip`` through a ``DataLoader(num_workers=k)``, as uint8 (``PILToTensor``, the
     same work as ours) and as the standard float ``ToTensor`` + ``Normalize`` recipe; at 1 core also in-process
     (``num_workers=0``: the transforms' own cost without worker IPC). Without torch, a PIL + numpy
     multiprocessing pool of k processes doing the same crops stands in (said so in the table).
3. Prints img/s, img/s per core, ours ÷ peer per core, and the host cores one accelerator needs at 7,000 img/s
   (MLPerf ResNet-50 on an H100) and 2,000 img/s (a TPU v3 chip).

The first batch of each run (process and worker start-up) is excluded from its rate. Decoders: PIL (libjpeg-turbo
in Pillow's wheels) unless OpenCV is importable.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = ((375, 500), (500, 375), (333, 500))  # (height, width), ImageNet's common shapes
NUM_CLASSES_USED = 100  # labels 0..99 (ImageFolder needs one folder per class)
ANCHORS = {"H100 (MLPerf ResNet-50)": 7000.0, "TPU v3 chip": 2000.0}
IMAGE_SIZE = 224


def synthetic_jpeg(rng: np.random.Generator, height: int, width: int, quality: int = 90) -> bytes:
  """A compressible ImageNet-sized JPEG: a smooth random colour field (an 8×6 grid upsampled bicubically) plus
  Gaussian grain (σ = 24), so it has edges, texture and ≈ 100 KB (ImageNet's average photo: ≈ 110 KB)."""
  from PIL import Image  # pylint: disable=import-outside-toplevel

  grid = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
  field = np.asarray(Image.fromarray(grid).resize((width, height), Image.Resampling.BICUBIC), np.float32)
  noisy = np.clip(field + rng.normal(0.0, 24.0, field.shape), 0, 255).astype(np.uint8)
  buf = io.BytesIO()
  Image.fromarray(noisy).save(buf, format="JPEG", quality=quality)
  return buf.getvalue()


def build_dataset(data_dir: str, num_images: int, num_eval: int = 16) -> Dict[str, Any]:
  """Writes the synthetic ``imagenet2012`` (tfds ArrayRecord) and its ImageFolder copy once; returns its stats."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

  stamp = os.path.join(data_dir, f"built_{num_images}.json")
  if os.path.exists(stamp):
    with open(stamp) as f:
      return json.load(f)
  folder = os.path.join(data_dir, "jpeg", "train")
  sizes: List[int] = []

  class SyntheticImagenet(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """``imagenet2012`` 5.1.0's name, version and features, with synthetic JPEGs."""

    name = "imagenet2012"
    VERSION = tfds.core.Version("5.1.0")
    code_path = None  # no checksums file to look up (tfds would resolve this module as a package resource)

    def _info(self):
      return tfds.core.DatasetInfo(
        builder=self,
        features=tfds.features.FeaturesDict(
          {
            "image": tfds.features.Image(encoding_format="jpeg"),
            "label": tfds.features.ClassLabel(num_classes=1000),
            "file_name": tfds.features.Text(),
          }
        ),
        supervised_keys=("image", "label"),
      )

    def _split_generators(self, dl_manager):
      del dl_manager
      return {
        "train": self._generate_examples(num_images, 0, True),
        "validation": self._generate_examples(num_eval, 1, False),
      }

    def _generate_examples(self, n, seed, export):
      rng = np.random.default_rng(seed)
      for i in range(n):
        h, w = SIZES[i % len(SIZES)]
        data = synthetic_jpeg(rng, h, w)
        label = i % NUM_CLASSES_USED
        name = f"n{label:08d}_{i}.JPEG"
        if export:
          sizes.append(len(data))
          os.makedirs(os.path.join(folder, f"n{label:08d}"), exist_ok=True)
          with open(os.path.join(folder, f"n{label:08d}", name), "wb") as f:
            f.write(data)
        yield i, {"image": data, "label": label, "file_name": name}

  t0 = time.perf_counter()
  SyntheticImagenet(data_dir=data_dir, file_format="array_record").download_and_prepare()
  stats = dict(images=num_images, mean_kb=float(np.mean(sizes)) / 1024, build_s=time.perf_counter() - t0)
  with open(stamp, "w") as f:
    json.dump(stats, f)
  return stats


# ------------------------------------------------------------------------------------------ child processes


def _pin(cores: int) -> None:
  avail = sorted(os.sched_getaffinity(0))
  os.sched_setaffinity(0, avail[:cores])


def _rate(batch_times: Sequence[float], batch_sizes: Sequence[int], t0: float) -> Dict[str, Any]:
  """img/s after the first batch (start-up excluded)."""
  images = sum(batch_sizes[1:])
  seconds = batch_times[-1] - batch_times[0]
  return dict(
    images=images,
    seconds=seconds,
    img_s=images / seconds if seconds > 0 else float("nan"),
    first_batch_s=batch_times[0] - t0,
  )


def child_ours(a: Any) -> Dict[str, Any]:
  import ml_collections  # pylint: disable=import-outside-toplevel
  from lamb_lars.input_pipeline import imagenet  # pylint: disable=import-outside-toplevel
  from tensorflow_datasets.core.features import image_feature  # pylint: disable=import-outside-toplevel

  config = ml_collections.ConfigDict(
    dict(
      dataset="imagenet2012",
      data_dir=a.data_dir,
      data_source="tfds",
      validation_split=0,
      seed=0,
      image_size=IMAGE_SIZE,
      grain_workers=a.grain_workers,
      grain_threads=a.grain_threads,
    )
  )
  t0 = time.perf_counter()
  times, sizes = [], []
  for batch in imagenet.train_batches(
    config, epoch=0, start_step=0, global_batch_size=a.batch, process_index=0, process_count=1
  ):
    assert batch["image"].shape[1:] == (IMAGE_SIZE, IMAGE_SIZE, 3) and batch["image"].dtype == np.uint8
    times.append(time.perf_counter())
    sizes.append(len(batch["label"]))
  out = _rate(times, sizes, t0)
  out["decoder"] = "OpenCV" if image_feature.cv2 is not None else "PIL"
  return out


def child_peer_torch(a: Any) -> Dict[str, Any]:
  import torch  # pylint: disable=import-outside-toplevel
  from torchvision import datasets, transforms  # pylint: disable=import-outside-toplevel

  torch.set_num_threads(1)
  crop = [
    transforms.RandomResizedCrop(IMAGE_SIZE, interpolation=transforms.InterpolationMode.BICUBIC),
    transforms.RandomHorizontalFlip(),
  ]
  if a.peer_float:
    tail = [transforms.ToTensor(), transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]
  else:
    tail = [transforms.PILToTensor()]
  ds = datasets.ImageFolder(os.path.join(a.data_dir, "jpeg", "train"), transform=transforms.Compose(crop + tail))
  workers = 0 if a.peer_in_process else a.cores
  loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=workers, drop_last=False)
  t0 = time.perf_counter()
  times, sizes = [], []
  for images, labels in loader:
    times.append(time.perf_counter())
    sizes.append(len(labels))
  out = _rate(times, sizes, t0)
  out.update(torch=torch.__version__, decoder="PIL (torchvision default loader)")
  return out


def _pil_item(args: tuple) -> np.ndarray:
  """Decode + random-resized crop + flip with PIL, as the peer without torch."""
  from PIL import Image  # pylint: disable=import-outside-toplevel
  from lamb_lars.input_pipeline.imagenet import random_resized_crop_box  # pylint: disable=import-outside-toplevel

  path, seed = args
  rng = np.random.default_rng(seed)
  with Image.open(path) as im:
    im = im.convert("RGB")
    top, left, h, w = random_resized_crop_box(im.height, im.width, rng)
    out = im.resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BICUBIC, box=(left, top, left + w, top + h))
  arr = np.asarray(out, np.uint8)
  return arr[:, ::-1] if rng.random() < 0.5 else arr


def child_peer_pil(a: Any) -> Dict[str, Any]:
  import multiprocessing  # pylint: disable=import-outside-toplevel

  root = os.path.join(a.data_dir, "jpeg", "train")
  paths = sorted(os.path.join(root, c, f) for c in os.listdir(root) for f in os.listdir(os.path.join(root, c)))
  order = np.random.default_rng(0).permutation(len(paths))
  t0 = time.perf_counter()
  times, sizes = [], []
  with multiprocessing.get_context("fork").Pool(a.cores) as pool:
    items = pool.imap(_pil_item, [(paths[i], int(i)) for i in order], chunksize=8)
    while True:
      chunk = [x for _, x in zip(range(a.batch), items)]
      if not chunk:
        break
      np.stack(chunk)
      times.append(time.perf_counter())
      sizes.append(len(chunk))
  out = _rate(times, sizes, t0)
  out["decoder"] = "PIL (multiprocessing pool, no torch)"
  return out


def run_child(a: Any) -> None:
  _pin(a.cores)
  fn = {"ours": child_ours, "peer_torch": child_peer_torch, "peer_pil": child_peer_pil}[a.child]
  print("RESULT " + json.dumps(fn(a)), flush=True)


# ------------------------------------------------------------------------------------------------ orchestrator


def spawn(
  python: str, child: str, cores: int, a: Any, extra: Sequence[str] = (), path_first: Optional[str] = None
) -> Dict[str, Any]:
  env = dict(os.environ)
  paths = [p for p in (path_first, REPO) if p]
  if python == sys.executable:
    paths.append(env.get("PYTHONPATH", ""))
  env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  cmd = [
    python,
    os.path.abspath(__file__),
    f"--child={child}",
    f"--cores={cores}",
    f"--data_dir={a.data_dir}",
    f"--batch={a.batch}",
    *extra,
  ]
  proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout_s, check=False)
  for line in proc.stdout.splitlines():
    if line.startswith("RESULT "):
      return json.loads(line[len("RESULT ") :])
  return dict(error=(proc.stderr or proc.stdout)[-500:].strip())


def _has_torch(python: str) -> bool:
  if not python or not os.path.exists(python):
    return False
  probe = subprocess.run([python, "-c", "import torch, torchvision"], capture_output=True, check=False)
  return probe.returncode == 0


def main(argv: Optional[Sequence[str]] = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--images", type=int, default=2000, help="training JPEGs to build (one epoch is timed)")
  p.add_argument("--cores", default="1,2", help="comma-separated core counts (workers) to pin each run to")
  p.add_argument("--batch", type=int, default=128, help="batch size of both pipelines")
  p.add_argument("--data_dir", default="/tmp/lamb_lars_imagenet_input", help="where the synthetic dataset lives")
  p.add_argument(
    "--peer_python",
    default="/work/venv-bench/bin/python",
    help="a Python with torch + torchvision for the peer (else a PIL + numpy pool stands in)",
  )
  p.add_argument(
    "--cv2_path",
    default="/work/venv-bench/cv2site",
    help="a folder with opencv-python-headless (pip install --target); '' skips the OpenCV run",
  )
  p.add_argument("--timeout_s", type=float, default=600.0, help="limit of one run")
  p.add_argument("--child", default=None, help=argparse.SUPPRESS)
  p.add_argument("--grain_workers", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--grain_threads", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--peer_float", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--peer_in_process", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--only", default="", help="run only the pipelines whose name contains this text")
  a = p.parse_args(argv)
  if a.child:
    a.cores = int(a.cores)
    run_child(a)
    return 0
  try:
    cores = [int(c) for c in a.cores.split(",")]
  except ValueError:
    cores = []
  available = len(os.sched_getaffinity(0))
  if not cores or min(cores) < 1 or max(cores) > available:
    print(
      f"imagenet_input: --cores must be comma-separated integers from 1 to {available} (this machine).", file=sys.stderr
    )
    return 2
  if a.images < 4 * a.batch or a.batch < 1:
    print(
      "imagenet_input: --images must be at least 4 batches (the first batch of each run is not timed).", file=sys.stderr
    )
    return 2
  stats = build_dataset(a.data_dir, a.images)
  torch_ok = _has_torch(a.peer_python)
  cv2_ok = bool(a.cv2_path) and os.path.isdir(os.path.join(a.cv2_path, "cv2"))
  load = os.getloadavg()
  print(
    f"# {a.images} synthetic JPEGs, mean {stats['mean_kb']:.0f} KB, in {a.data_dir}; batch {a.batch}; "
    f"{available} cores available; load average {load[0]:.1f} at start; peer: "
    f"{'torch ' + a.peer_python if torch_ok else 'PIL + numpy pool (no torch)'}",
    file=sys.stderr,
    flush=True,
  )
  rows: List[Dict[str, Any]] = []

  def add(name: str, k: int, res: Any) -> None:
    if a.only not in name:
      return
    res = res()
    row = dict(pipeline=name, cores=k, **res)
    if "img_s" in res:
      row["img_s_core"] = res["img_s"] / k
    rows.append(row)
    msg = f"{row['img_s']:.0f} img/s, {row['img_s_core']:.0f} per core" if "img_s" in row else row.get("error")
    print(f"  {name:<40} {k} core(s): {msg}", file=sys.stderr, flush=True)

  for k in cores:
    add("ours: grain threads, 1 process", k, lambda: spawn(sys.executable, "ours", k, a))
    add(f"ours: grain_workers={k}", k, lambda: spawn(sys.executable, "ours", k, a, [f"--grain_workers={k}"]))
    if cv2_ok:
      add("ours: grain threads, OpenCV decode", k, lambda: spawn(sys.executable, "ours", k, a, path_first=a.cv2_path))
    if torch_ok:
      add("peer: torchvision uint8 (PILToTensor)", k, lambda: spawn(a.peer_python, "peer_torch", k, a))
      add(
        "peer: torchvision float (ToTensor+Normalize)",
        k,
        lambda: spawn(a.peer_python, "peer_torch", k, a, ["--peer_float"]),
      )
      if k == 1:  # the peer's own work without DataLoader worker processes (no IPC): its per-core ceiling
        add(
          "peer: torchvision uint8, num_workers=0",
          k,
          lambda: spawn(a.peer_python, "peer_torch", k, a, ["--peer_in_process"]),
        )
    else:
      add("peer: PIL + numpy pool", k, lambda: spawn(sys.executable, "peer_pil", k, a))
  print(table(rows, a, stats, load))
  return 0


def table(rows: Sequence[Dict[str, Any]], a: Any, stats: Dict[str, Any], load: tuple) -> str:
  """Markdown: one row per run, then ours ÷ peer per core and host cores needed at the anchor rates."""
  lines = [
    f"ImageNet input pipeline, {a.images} synthetic JPEGs (mean {stats['mean_kb']:.0f} KB), 224² crops, batch "
    f"{a.batch}; load average {load[0]:.1f} at start.",
    "",
    "| pipeline | cores | img/s | img/s per core | decoder |",
    "|---|---|---|---|---|",
  ]
  for r in rows:
    if "img_s" in r:
      lines.append(
        f"| {r['pipeline']} | {r['cores']} | {r['img_s']:.0f} | {r['img_s_core']:.0f} | {r.get('decoder', '')} |"
      )
    else:
      lines.append(f"| {r['pipeline']} | {r['cores']} | error | | {str(r.get('error'))[:80]} |")
  lines += [
    "",
    "| cores | best ours per core | peer (uint8) per core | ours ÷ peer | "
    + " | ".join(f"cores for {v:,.0f} img/s ({k})" for k, v in ANCHORS.items())
    + " |",
    "|---" * (4 + len(ANCHORS)) + "|",
  ]
  for k in sorted({r["cores"] for r in rows}):
    ok = [r for r in rows if r["cores"] == k and "img_s" in r]
    ours = max((r for r in ok if r["pipeline"].startswith("ours")), key=lambda r: r["img_s"], default=None)
    peers = [
      r
      for r in ok
      if r["pipeline"].startswith("peer") and "float" not in r["pipeline"] and "num_workers=0" not in r["pipeline"]
    ]
    if not ours:
      continue
    peer = peers[0]["img_s_core"] if peers else float("nan")
    need = " | ".join(f"{v / ours['img_s_core']:.0f} (ours), {v / peer:.0f} (peer)" for v in ANCHORS.values())
    lines.append(
      f"| {k} | {ours['img_s_core']:.0f} ({ours['pipeline'][6:]}) | {peer:.0f} | "
      f"{ours['img_s_core'] / peer:.2f}× | {need} |"
    )
  return "\n".join(lines)


if __name__ == "__main__":
  sys.exit(main())
