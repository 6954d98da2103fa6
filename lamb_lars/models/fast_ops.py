"""Fast CPU building block for LeNet: 5×5 conv → +bias → ReLU → 2×2/2 max-pool as GEMMs with a hand-written VJP.

Why: XLA:CPU runs LeNet's convolutions and, above all, their gradients and the max-pool gradient far below what
the CPU can do (docs/science.md §5: conv1 forward 8.7 ms, conv2 input+weight gradients 10.6 ms, max-pool gradient 7.8 ms
at batch 256). Dense matrix products, in contrast, run at 90–150 GFLOP/s per core here. So each conv+pool block
is written as three GEMMs (forward, weight gradient, input gradient) around cheap copies.

The "pool-block" GEMM. For a k×k kernel W[kh, kw, ci, co] followed by a 2×2/2 max-pool, all four conv outputs of
one pooling window (window position q = (qh, qw), row-major) read one (k+1)×(k+1) input patch. With
  T[(qh, qw, co), (dh, dw, ci)] = W[dh − qh, dw − qw, ci, co]   (zero outside the kernel),
  X[(dh, dw, ci), l]            = input[ci, 2·ph + dh, 2·pw + dw, b]   for pooled position l = (ph, pw, b),
  Y = T @ X                     holds, for each l, the 4 conv outputs of its window (4·co rows),
  out = relu(max_q(Y[q] + bias)) = maxpool(relu(conv + bias))      (max and ReLU commute; same float values).
It spends (k+1)²/k² = 1.44× the FLOPs of a direct convolution and needs no transposes.

Gradient, identical to XLA's for `nn.max_pool(nn.relu(conv))`: the pooled gradient goes to the *first* maximum of
each window in row-major order (XLA's select-and-scatter; also PyTorch's), and nowhere when the window's maximum is
≤ 0 (ReLU's derivative at 0 is 0 in JAX and PyTorch). The forward keeps one int8 per pooled value, `code` ∈
{0, 1, 2, 3} (that window position) or 4 (no gradient), and the backward forms
  G[q, co, l] = g[co, l] · [code[co, l] = q],  dT = G Xᵀ (→ dW by summing T's diagonals), dX = Tᵀ G (→ col2im),
  dbias = Σ_l g[co, l] · [code < 4].

Layouts (batch last, so every copy moves contiguous runs of the batch):
  * `conv_pool_relu_image`: input [ci, H, W, B] (already padded); output "parity-split" [co, 2, 2, H/4, W/4, B]:
    pooled row 2·hq + hpar is stored at [hpar, hq] (same for columns). The next block's patch extraction then
    becomes contiguous slices.
  * `conv_pool_relu_split`: input parity-split [ci, 2, 2, Hq, Wq, B]; output plain [co, Hp, Wp, B].
Only odd k (so (k+1) is even) and even pooled sizes are supported; the functions check this.
"""

from __future__ import annotations

import functools
from typing import Iterable, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def _shift_matrix(k: int) -> np.ndarray:
  """S[q, d, i] = 1 iff d == q + i: places kernel tap i at patch offset d for window position q ∈ {0, 1}."""
  s = np.zeros((2, k + 1, k), np.float32)
  for q in range(2):
    s[q, q + np.arange(k), np.arange(k)] = 1.0
  return s


def window_kernel(w: jnp.ndarray) -> jnp.ndarray:
  """T6[qh, qw, co, dh, dw, ci] = w[dh − qh, dw − qw, ci, co] (zero outside), from an HWIO kernel."""
  kh, kw = w.shape[:2]
  sh, sw = _shift_matrix(kh).astype(w.dtype), _shift_matrix(kw).astype(w.dtype)
  return jnp.einsum("qdk,rel,klio->qrodei", sh, sw, w)


def window_kernel_grad(d6: jnp.ndarray, kshape: tuple[int, ...]) -> jnp.ndarray:
  """Transpose of `window_kernel`: dW[i, j, ci, co] = Σ_q dT6[q, co, i + qh, j + qw, ci] (the diagonals' sums).

  Written out rather than via jax.vjp, which inside shard_map would mix a device-varying cotangent with a
  replicated kernel."""
  kh, kw = kshape[:2]
  sh, sw = _shift_matrix(kh).astype(d6.dtype), _shift_matrix(kw).astype(d6.dtype)
  return jnp.einsum("qrodei,qdk,rel->klio", d6, sh, sw)


def _kmat_image(w: jnp.ndarray) -> jnp.ndarray:
  """GEMM kernel for `conv_pool_relu_image`: rows (q, co), columns (dh, dw, ci)."""
  kh, kw, ci, co = w.shape
  return window_kernel(w).reshape(4 * co, (kh + 1) * (kw + 1) * ci)


def _kmat_image_grad(dt: jnp.ndarray, kshape: tuple[int, ...]) -> jnp.ndarray:
  kh, kw, ci, co = kshape
  return window_kernel_grad(dt.reshape(2, 2, co, kh + 1, kw + 1, ci), kshape)


def _kmat_split(w: jnp.ndarray) -> jnp.ndarray:
  """GEMM kernel for `conv_pool_relu_split`: rows (q, co), columns (eh, ew, ci, hpar, wpar), dh = 2·eh + hpar."""
  kh, kw, ci, co = w.shape
  eh, ew = (kh + 1) // 2, (kw + 1) // 2
  t = window_kernel(w).reshape(4 * co, eh, 2, ew, 2, ci)
  return t.transpose(0, 1, 3, 5, 2, 4).reshape(4 * co, eh * ew * ci * 4)


def _kmat_split_grad(dt: jnp.ndarray, kshape: tuple[int, ...]) -> jnp.ndarray:
  kh, kw, ci, co = kshape
  eh, ew = (kh + 1) // 2, (kw + 1) // 2
  d = dt.reshape(2, 2, co, eh, ew, ci, 2, 2).transpose(0, 1, 2, 3, 6, 4, 7, 5)
  return window_kernel_grad(d.reshape(2, 2, co, kh + 1, kw + 1, ci), kshape)


def _im2col_image(a: jnp.ndarray, kh: int, kw: int) -> jnp.ndarray:
  """[ci, H, W, B] → X[(dh, dw, ci), (hpar, wpar, hq, wq, b)] with input row 4·hq + 2·hpar + dh (same for cols).

  One stride-2 slice per patch offset (dh, dw) covers all pooled rows 2·t + dh, t = 2·hq + hpar.
  """
  ci, h, w, b = a.shape
  hq, wq = (h - kh + 1) // 4, (w - kw + 1) // 4
  cols = []
  for dh in range(kh + 1):
    for dw in range(kw + 1):
      s = lax.slice(a, (0, dh, dw, 0), (ci, dh + 4 * hq - 1, dw + 4 * wq - 1, b), (1, 2, 2, 1))  # [ci, 2hq, 2wq, b]
      cols.append(s.reshape(ci, hq, 2, wq, 2, b).transpose(0, 2, 4, 1, 3, 5))
  return jnp.stack(cols, 0).reshape((kh + 1) * (kw + 1) * ci, 4 * hq * wq * b)


def _im2col_split(p: jnp.ndarray, kh: int, kw: int) -> jnp.ndarray:
  """[ci, 2, 2, Hq, Wq, B] → X[(eh, ew, ci, hpar, wpar), (ph, pw, b)]: contiguous slices, one per (eh, ew)."""
  ci, _, _, hq, wq, b = p.shape
  eh, ew = (kh + 1) // 2, (kw + 1) // 2
  hp, wp = hq - eh + 1, wq - ew + 1
  x = jnp.concatenate([p[:, :, :, i : i + hp, j : j + wp] for i in range(eh) for j in range(ew)], 0)
  return x.reshape(eh * ew * ci * 4, hp * wp * b)


def _col2im_split(d: jnp.ndarray, shape: tuple[int, ...], kh: int, kw: int) -> jnp.ndarray:
  """Transpose of `_im2col_split`: scatter-add the patch gradients back, as in-place slice updates.

  In-place updates keep XLA from re-computing a sum of padded copies inside every consumer (it did, and
  that cost more than the GEMMs).
  """
  ci, _, _, hq, wq, b = shape
  eh, ew = (kh + 1) // 2, (kw + 1) // 2
  hp, wp = hq - eh + 1, wq - ew + 1
  d = d.reshape(eh, ew, ci, 2, 2, hp, wp, b)
  acc = jnp.pad(d[0, 0], ((0, 0), (0, 0), (0, 0), (0, hq - hp), (0, wq - wp), (0, 0)))
  for i in range(eh):
    for j in range(ew):
      if i or j:
        start = (0, 0, 0, i, j, 0)
        acc = lax.dynamic_update_slice(acc, lax.dynamic_slice(acc, start, d.shape[2:]) + d[i, j], start)
  return acc


def _pool_code(y: jnp.ndarray, bias: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
  """Y[(q, co), L] → (relu(max_q Y + bias), int8 code: first maximal q, or 4 where the maximum is ≤ 0).

  One variadic reduce yields both the maximum and its first position; being a reduce, XLA materialises the
  code instead of recomputing it inside the backward's consumers.
  """
  co = bias.shape[0]
  yb = y.reshape(4, co, -1) + bias[None, :, None]
  iota = lax.broadcasted_iota(jnp.int32, yb.shape, 0)

  def pick(u, v):
    (uv, ui), (vv, vi) = u, v
    take_u = (uv > vv) | ((uv == vv) & (ui < vi))
    return lax.select(take_u, uv, vv), lax.select(take_u, ui, vi)

  m, idx = lax.reduce((yb, iota), (jnp.array(-jnp.inf, yb.dtype), jnp.int32(4)), pick, (0,))
  code = jnp.where(m > 0, idx, 4).astype(jnp.int8)
  return jnp.maximum(m, 0), code


_LAYOUTS = {
  # name: (GEMM kernel, its transpose (kernel gradient), im2col)
  "image": (_kmat_image, _kmat_image_grad, _im2col_image),
  "split": (_kmat_split, _kmat_split_grad, _im2col_split),
}


def _col2im(layout: str, d: jnp.ndarray, a: jnp.ndarray, kh: int, kw: int) -> jnp.ndarray:
  """Transpose of the layout's im2col applied to d; ``a`` is the block input (im2col is linear, any point will do)."""
  if layout == "split":
    return _col2im_split(d, a.shape, kh, kw)
  # The image block's input gradient is rarely needed (XLA drops it when unused); plain autodiff suffices.
  _, vjp = jax.vjp(lambda a: _im2col_image(a, kh, kw), a)
  return vjp(d)[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _conv_pool_relu(a: jnp.ndarray, w: jnp.ndarray, b: jnp.ndarray, layout: str) -> jnp.ndarray:
  kmat, _, im2col = _LAYOUTS[layout]
  return _pool_code(kmat(w) @ im2col(a, *w.shape[:2]), b)[0]


def _cpr_fwd(a, w, b, layout):
  kmat, _, im2col = _LAYOUTS[layout]
  out, code = _pool_code(kmat(w) @ im2col(a, *w.shape[:2]), b)
  # Keep the block input, not its 5–8× larger patch matrix: the backward re-extracts the patches (a cheap copy
  # that XLA usually shares with the forward's), which halves the memory traffic at large batch.
  return out, (a, w, code)


def _cpr_bwd(layout, res, g):
  a, w, code = res
  kmat, kgrad, im2col = _LAYOUTS[layout]
  kh, kw, _, co = w.shape
  db = jnp.where(code < 4, g, 0).sum(1)
  q = jnp.arange(4, dtype=jnp.int8)[:, None, None]
  gy = jnp.where(code[None] == q, g[None], 0).reshape(4 * co, -1)
  x = im2col(a, kh, kw)
  dt = lax.dot_general(gy, x, (((1,), (1,)), ((), ())))  # [4·co, K]
  dw = kgrad(dt, w.shape)
  da = _col2im(layout, kmat(w).T @ gy, a, kh, kw)
  return da, dw, db


_conv_pool_relu.defvjp(_cpr_fwd, _cpr_bwd)


def _varying_axes(x: jnp.ndarray) -> frozenset:
  """Mesh axes over which x varies inside shard_map (empty outside)."""
  aval = jax.typeof(x)
  vma = getattr(aval, "vma", None)
  if vma is None:
    vma = getattr(getattr(aval, "manual_axis_type", None), "varying", frozenset())
  return frozenset(cast(Iterable, vma))


def _same_variance(*xs: jnp.ndarray) -> list[jnp.ndarray]:
  """Marks all of xs as varying over the union of their axes, as JAX does implicitly for built-in ops.

  Inside shard_map a replicated kernel meets device-varying activations; the custom VJP must see both as varying so
  that its kernel gradient (varying) matches its input type. JAX transposes the cast into a psum.
  """
  axes = frozenset().union(*map(_varying_axes, xs))
  out = []
  for x in xs:
    missing = tuple(sorted(axes - _varying_axes(x)))
    out.append(lax.pcast(x, missing, to="varying") if missing else x)
  return out


def _check(w: jnp.ndarray, conv_out_hw: tuple[int, int], multiple: int) -> None:
  kh, kw = w.shape[:2]
  if kh % 2 == 0 or kw % 2 == 0:
    raise ValueError(f"fast conv block needs odd kernel sizes, got {kh}×{kw}")
  if any(s <= 0 or s % multiple for s in conv_out_hw):
    raise ValueError(f"fast conv block needs conv output sizes divisible by {multiple}, got {conv_out_hw}")


def conv_pool_relu_image(a: jnp.ndarray, w: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
  """maxpool2x2(relu(conv_valid(a, w) + b)) for a padded input a[ci, H, W, B] → parity-split [co, 2, 2, Hq, Wq, B].

  The conv output (H − kh + 1) × (W − kw + 1) must be divisible by 4, so the pooled map splits by parity.
  """
  kh, kw, _, co = w.shape
  _check(w, (a.shape[1] - kh + 1, a.shape[2] - kw + 1), 4)
  hq, wq = (a.shape[1] - kh + 1) // 4, (a.shape[2] - kw + 1) // 4
  a, w, b = _same_variance(a, w, b)
  return _conv_pool_relu(a, w, b, "image").reshape(co, 2, 2, hq, wq, a.shape[3])


def conv_pool_relu_split(p: jnp.ndarray, w: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
  """maxpool2x2(relu(conv_valid(p, w) + b)) for a parity-split input p[ci, 2, 2, Hq, Wq, B] → [co, Hp, Wp, B]."""
  kh, kw, _, co = w.shape
  hq, wq = p.shape[3], p.shape[4]
  _check(w, (2 * hq - kh + 1, 2 * wq - kw + 1), 2)
  hp, wp = hq - (kh + 1) // 2 + 1, wq - (kw + 1) // 2 + 1
  p, w, b = _same_variance(p, w, b)
  return _conv_pool_relu(p, w, b, "split").reshape(co, hp, wp, p.shape[5])
