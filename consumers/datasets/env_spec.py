"""Whether a producer's env spec may go into a Minari dataset: data, never code.

A Minari dataset's env spec is what `MinariDataset.recover_environment()` hands to
`gym.make`, which imports and calls the spec's entry points (the env's, each wrapper's)
with its kwargs. A producer's spec (the reset observation's `rlmesh.env_spec` info) is
text that anyone who can write to the topics controls: `"entry_point": "os:system"`
would run a command on the machine of whoever loads the dataset. So a producer's spec is
taken only as one the exporting machine's own Gymnasium registry would make:

- its id is the route's `env_id`, and that id is registered in the local Gymnasium
  registry as this process has it (looked up, never imported: `gym.spec("mod:Id")` would
  import `mod`, a name the producer chose);
- its entry point (and vector entry point, if any) is the registry's for that id;
- its kwargs are parameters of the registered env's constructor;
- each wrapper is one of Gymnasium's own (`gymnasium.wrappers`, already imported by
  `import gymnasium.wrappers`), none of `gymnasium.wrappers.rendering` (they write video
  files or open windows), or one the registration itself applies; its kwargs are
  parameters of that wrapper.

Anything else is `UNTRUSTED`: the spec is dropped (the episode stays; the dataset's spec
is then Gymnasium's registration of the id, or none) and counted. A spec that is not a
spec at all (not JSON, keys missing or of the wrong type, an id Gymnasium cannot parse)
is `MALFORMED`: its episode is skipped and counted, since nobody can tell under which
env it ran. `trust=True` (`--trust-env-spec`) takes any well-formed spec as it is.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from collections.abc import Callable
from typing import Any

MALFORMED = "env_spec:malformed"
UNTRUSTED = "env_spec:untrusted"

# the JSON type of each field `EnvSpec.to_json` writes (None allowed where the field's is);
# those `EnvSpec.from_json` cannot do without, and the entry point, are required
_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,), "entry_point": (str,), "reward_threshold": (int, float, type(None)),
    "nondeterministic": (bool,), "max_episode_steps": (int, type(None)),
    "order_enforce": (bool,), "disable_env_checker": (bool,), "kwargs": (dict,),
    "additional_wrappers": (list,), "vector_entry_point": (str, type(None)),
}
_REQUIRED = ("id", "entry_point", "additional_wrappers")
_WRAPPER_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,), "entry_point": (str,), "kwargs": (dict, type(None))}
# Gymnasium's wrappers with effects outside the env: video files, windows
_DENIED_WRAPPER_MODULES = frozenset({"gymnasium.wrappers.rendering"})


@dataclasses.dataclass(frozen=True)
class Verdict:
    spec: Any  # the `EnvSpec` to use; None when `reason` is set
    reason: str | None = None  # MALFORMED, UNTRUSTED, or None (accepted)
    detail: str = ""  # why, in words


class SpecVetter:
    """Vets producers' specs, remembering the verdict per (text, env id): a producer sends
    one spec with every episode's reset, so most episodes cost a dictionary look-up. The
    memory is bounded (`limit` verdicts, then it starts over): producers that send a new
    spec text every episode cost a parse each, never memory."""

    def __init__(self, *, trust: bool = False, limit: int = 256) -> None:
        self.trust = trust
        self.limit = limit
        self._seen: dict[tuple[str, str], Verdict] = {}

    def vet(self, text: str, env_id: str) -> Verdict:
        key = (text, env_id)
        verdict = self._seen.get(key)
        if verdict is None:
            if len(self._seen) >= self.limit:
                self._seen.clear()
            verdict = self._seen[key] = vet(text, env_id, trust=self.trust)
        return verdict


def vet(text: str, env_id: str, *, trust: bool = False) -> Verdict:
    """The producer's spec `text` for an episode of the route's `env_id`."""
    spec, problem = _parse(text)
    if problem:
        return Verdict(None, MALFORMED, problem)
    if trust:
        return Verdict(spec)
    problem = _untrusted(spec, env_id)
    if problem:
        return Verdict(None, UNTRUSTED, problem)
    return Verdict(spec)


def spec_json(spec: Any, max_episode_steps: int | None) -> str:
    """`spec`'s JSON, its step limit replaced by `max_episode_steps` when given."""
    if max_episode_steps is not None:
        spec = dataclasses.replace(spec, max_episode_steps=max_episode_steps)
    return str(spec.to_json())


def dataset_spec(text: str | None, env_id: str, max_episode_steps: int | None,
                 vetter: SpecVetter) -> tuple[Any, str]:
    """A dataset's env spec and where it came from, given its first episode's producer
    spec `text` (None: the producer sent none) and env id: the producer's (the env as it
    ran, when `vetter` takes it), Gymnasium's registration of the env id ("registry
    default"), or none (an id the local registry does not hold); `max_episode_steps`
    replaces the step limit of either."""
    source = "producer"
    spec = vetter.vet(text, env_id).spec if text is not None else None
    if spec is None:
        source = "registry default"
        spec = registered(env_id)
    if spec is None:
        return None, "none"
    if max_episode_steps is not None:  # a copy: the registry's spec is the registry's own
        spec = dataclasses.replace(spec, max_episode_steps=max_episode_steps)
        source += ", --max-episode-steps"
    return spec, source


def registered(env_id: str) -> Any:
    """The local Gymnasium registry's spec of `env_id`, or None, importing nothing."""
    from gymnasium.envs.registration import registry

    return registry.get(env_id) if isinstance(env_id, str) else None


def _parse(text: str) -> tuple[Any, str]:
    """An `EnvSpec` from `text` (as `EnvSpec.from_json` reads it), or why it is none."""
    from gymnasium.envs.registration import EnvSpec

    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, f"not JSON ({type(exc).__name__})"
    if not isinstance(data, dict):
        return None, f"a JSON {type(data).__name__}, not an object"
    problem = _typed(data, _FIELDS, "", _REQUIRED)
    if problem:
        return None, problem
    for i, wrapper in enumerate(data["additional_wrappers"]):
        if not isinstance(wrapper, dict):
            return None, f"additional_wrappers[{i}] is not an object"
        problem = _typed(wrapper, _WRAPPER_FIELDS, f"additional_wrappers[{i}].",
                         tuple(_WRAPPER_FIELDS))
        if problem:
            return None, problem
    for name, kwargs in _all_kwargs(data):
        if not all(isinstance(k, str) for k in kwargs):
            return None, f"{name} has a key that is not a string"
    steps = data.get("max_episode_steps")
    if steps is not None and (isinstance(steps, bool) or steps < 1):
        return None, f"max_episode_steps is {steps!r}"
    try:
        return EnvSpec.from_json(text), ""
    except Exception as exc:  # Gymnasium wraps each error in ValueError
        return None, f"not an EnvSpec ({type(exc).__name__})"


def _typed(data: dict[str, Any], fields: dict[str, tuple[type, ...]], where: str,
           required: tuple[str, ...]) -> str:
    missing = [name for name in required if name not in data]
    if missing:
        return f"{where}{missing[0]} is missing"
    extra = sorted(set(data) - set(fields))
    if extra:
        return f"{where}{extra[0]!r} is not a field"
    for name, value in data.items():
        types = fields[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return f"{where}{name} is a JSON {type(value).__name__}"
    return ""


def _all_kwargs(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = [("kwargs", data.get("kwargs", {}))]
    out += [(f"additional_wrappers[{i}].kwargs", w["kwargs"])
            for i, w in enumerate(data["additional_wrappers"]) if w["kwargs"] is not None]
    return out


def _untrusted(spec: Any, env_id: str) -> str:
    """Why `spec` is not one the local registry would make for `env_id` ("" if it is)."""
    if spec.id != env_id:
        return f"its id {spec.id!r} is not the episode's env id {env_id!r}"
    known = registered(env_id)
    if known is None:
        return f"the local Gymnasium registry has no env {env_id!r} to check it against"
    if not isinstance(known.entry_point, str) or spec.entry_point != known.entry_point:
        return (f"entry point {spec.entry_point!r} is not {env_id}'s "
                f"({known.entry_point!r})")
    if spec.vector_entry_point not in (None, known.vector_entry_point):
        return f"vector entry point {spec.vector_entry_point!r} is not {env_id}'s"
    if spec.kwargs:
        problem = _kwargs_problem(known.entry_point, spec.kwargs, env_id)
        if problem:
            return problem
    own = {w.entry_point for w in known.additional_wrappers}
    for wrapper in spec.additional_wrappers:
        problem = _wrapper_problem(wrapper, own)
        if problem:
            return problem
    return ""


def _kwargs_problem(entry_point: str, kwargs: dict[str, Any], env_id: str) -> str:
    from gymnasium.envs.registration import load_env_creator

    try:  # the registry's own entry point: what `gym.make(env_id)` imports anyway
        creator = load_env_creator(entry_point)
    except Exception as exc:  # a registered env whose package is missing
        return f"{env_id}'s entry point cannot be loaded to check its kwargs ({exc})"
    unknown = _not_parameters(creator, kwargs)
    return f"{env_id} takes no kwarg {unknown!r}" if unknown else ""


def _wrapper_problem(wrapper: Any, own: set[str]) -> str:
    import gymnasium as gym
    import gymnasium.wrappers  # imports Gymnasium's wrapper modules

    module, _, name = str(wrapper.entry_point).partition(":")
    found = sys.modules.get(module) if module.startswith("gymnasium.wrappers.") else None
    cls = getattr(found, name, None) if found is not None and name.isidentifier() else None
    if wrapper.entry_point not in own:
        if module in _DENIED_WRAPPER_MODULES:
            return f"wrapper {wrapper.entry_point!r} writes files or opens windows"
        if not (isinstance(cls, type) and issubclass(cls, gym.Wrapper)
                and cls.__module__ == module):
            return f"wrapper {wrapper.entry_point!r} is not one of Gymnasium's own"
    if cls is not None and wrapper.kwargs:
        unknown = _not_parameters(cls, wrapper.kwargs)
        if unknown:
            return f"wrapper {wrapper.name!r} takes no kwarg {unknown!r}"
    return ""


def _not_parameters(creator: Callable[..., Any], kwargs: dict[str, Any]) -> str:
    """The first of `kwargs` that `creator` does not take ("" if it takes them all)."""
    try:
        parameters = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):
        return next(iter(kwargs))
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return ""
    names = {p.name for p in parameters
             if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                           inspect.Parameter.KEYWORD_ONLY)}
    return next((k for k in kwargs if k not in names), "")
