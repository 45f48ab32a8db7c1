"""What runs on the workers: the functions scattered nodes submit, and what an accumulate step returns.

Dask sends these to the workers by reference (module and name), so the
workers must import the same rivermark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar, cast

T = TypeVar("T")


def _value(x: T) -> T:
    """Identity run on a worker: makes a recomputable future out of a record."""
    return x


def _apply(
    func: Callable[..., object], x: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    return func(x, *args, **kwargs)


def _apply_star(
    func: Callable[..., object],
    x: Iterable[object],
    args: tuple[object, ...],
    kwargs: dict[str, object],
) -> object:
    return func(*x, *args, **kwargs)


@dataclass(frozen=True)
class _Step:
    """What one scattered accumulate step produced (lives on the cluster)."""

    state: object
    result: object
    error: BaseException | None


def _accumulate_step(
    func: Callable[..., object],
    previous: object,
    x: object,
    returns_state: bool,
    kwargs: dict[str, object],
) -> _Step:
    # ``previous`` is the step before (so a record costs one scheduler hop on
    # the chain, not two) or, for the first step, the initial state itself.
    # A failing step keeps the previous state (as the local accumulate does
    # when the error policy drops the record); the error resurfaces in
    # ``_step_result`` so ``gather`` applies the node's policy to it.
    state = cast("_Step", previous).state if type(previous) in _STEP_TYPES else previous
    try:
        out = func(state, x, **kwargs)
        if returns_state:
            new_state, result = cast("tuple[object, object]", out)
        else:
            new_state = result = out
    except Exception as e:
        return _Step(state, None, e)
    return _Step(new_state, result, None)


@dataclass(frozen=True)
class _StepBatch:
    """What one batched accumulate task produced: the last state, a result or error per record."""

    state: object
    results: list[object]
    errors: list[BaseException | None]


def _accumulate_batch(
    func: Callable[..., object],
    previous: object,
    xs: list[object],
    returns_state: bool,
    with_state: bool,
    kwargs: dict[str, object],
) -> _StepBatch:
    # The records of one batch folded in order, exactly as one _accumulate_step
    # each would fold them (a failing record keeps the state before it).
    state = cast("_Step", previous).state if type(previous) in _STEP_TYPES else previous
    results: list[object] = []
    errors: list[BaseException | None] = []
    for x in xs:
        step = _accumulate_step(func, state, x, returns_state, kwargs)
        state = step.state
        results.append((state, step.result) if with_state else step.result)
        errors.append(step.error)
    return _StepBatch(state, results, errors)


_STEP_TYPES: tuple[type, ...] = (_Step, _StepBatch)


def _step_state(step: _Step) -> object:
    return step.state


def _step_result(step: _Step) -> object:
    if step.error is not None:
        raise step.error
    return step.result
