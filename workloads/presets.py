"""Bundled model presets (one YAML file per model) and the name resolution used to find them.

Owns `MODEL_PRESETS` (name -> ModelSpec from workloads/presets/*.yaml, each file read on its first
lookup: `PresetFiles`), the alias table that maps the model strings of published_runs.csv and
common spellings onto preset names, `get_model` and `load_model` (user YAML files or mappings).
Does not own training settings.

YAML keys are exactly the `ModelSpec` field names plus `source` (the citation of the shape).
"""

import dataclasses
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from clustersim.workloads.errors import WorkloadError
from clustersim.workloads.hf_config import model_from_hf_config
from clustersim.workloads.model import ModelSpec

PRESET_DIR = Path(__file__).parent / "presets"
DATA_DIR = Path(__file__).parent / "data"
"""The bundled data sets (published runs, collective sweeps) with their sources (data/SOURCES.md)."""
# libyaml's safe loader when built in (5x faster at import), else the pure-Python one
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Normalised alias -> preset name. Keys are what `normalise_model_name` makes of the `model`
# column of workloads/data/published_runs.csv and of common spellings.
MODEL_ALIASES: dict[str, str] = {
    "llama3.1-405b": "llama3-405b",
    "llama-3.1-405b": "llama3-405b",
    "llama3.1-70b": "llama3-70b",
    "llama3.1-8b": "llama3-8b",
    "llama-3-8b": "llama3-8b",
    "llama-3-70b": "llama3-70b",
    "deepseekv3": "deepseek-v3",
    "deepseekv3-w-o-mtp": "deepseek-v3",
    "deepseekv3-w-mtp": "deepseek-v3-mtp",
    "kimi-k2-base": "kimi-k2",
    "nemotron4-340b": "nemotron-4-340b",
    "nemotron-340b": "nemotron-4-340b",
    "nemotron4-15b": "nemotron-4-15b",  # DGX Cloud Benchmarking README tables: "Nemotron4 15b"
    "nemotron-15b": "nemotron-4-15b",
    "gpt-3-175b": "gpt3-175b",
    "gpt-174.6b": "gpt3-175b",
    "megatron-175b": "gpt3-175b",
    "megatron-530b": "gpt-529.6b",
    "megatron-1t": "gpt-1008.0b",
    "gpt-3-175b-slightly-175b-due-to-larger-vocab": "gpt-177b",
    "mixtral-8x7b-v0.1": "mixtral-8x7b",
    "mixtral-8x22b-v0.1": "mixtral-8x22b",
    "grok1": "grok-1",
    "grok1-314b": "grok-1",  # DGX Cloud Benchmarking README tables: "Grok1 314b", "Grok 1 314b"
    "grok-1-314b": "grok-1",
    "llama-4-scout": "llama4-scout",
    "llama4-scout-17b-16e": "llama4-scout",
    "llama4-maverick-400b": "llama4-maverick",  # DGX Cloud Benchmarking README tables: "LLAMA4 maverick 400b"
    "llama4-maverick-17b-128e": "llama4-maverick",  # hub id meta-llama/Llama-4-Maverick-17B-128E(-Instruct)
    "llama3.3-70b": "llama3-70b",  # Llama 3.3 70B: the Llama 3.1 70B architecture (same config.json shape)
    "olmo-2-0425-1b": "olmo2-1b",
    "olmo2-0425-1b": "olmo2-1b",
    "gemma-2-9b": "gemma2-9b",
    "gemma-3-12b": "gemma3-12b",
    "gemma-3-12b-pt": "gemma3-12b",
    "phi-3-mini-4k": "phi3-mini",
    "phi-3-mini": "phi3-mini",
    "dbrx-132b": "dbrx",  # databricks/dbrx-base and -instruct resolve through the suffix rule
}

MODEL_SPELLING_RULES: tuple[tuple[str, str, str], ...] = (
    (r"^[\w.-]+/", "", "hub id: organisation dropped (meta-llama/Llama-3.1-8B -> Llama-3.1-8B)"),
    (r"[-_ ](hf|base|instruct|chat|it)$", "", "checkpoint suffix: -hf, -Base, -Instruct, -chat, -it"),
    (r"^meta-", "", "Meta-Llama-3-8B -> Llama-3-8B"),
    (r"^llama-(\d)", r"llama\1", "Llama 2 70B / Llama-2-70b -> llama2-70b; Llama-3.1-8B -> llama3.1-8b"),
)
"""(regex, replacement, spellings) applied in order to the normalised name before the lookup: the
spellings a model card, a hub id or a paper uses for a preset."""

KNOWN_FAMILIES = r"llama|mistral|mixtral|qwen|deepseek|gemma|phi|falcon|olmo|nemotron|mpt|gpt-oss|dbrx|grok|starcoder|kimi"
"""Model families whose shape is never GPT-style: a name of one without a preset is an error, not a
fallback to a generic model."""


def canonical_model_name(name: str) -> str:
    """``name`` normalised and rewritten by ``MODEL_SPELLING_RULES``."""
    key = normalise_model_name(name.strip().rsplit("/", 1)[-1] if "/" in name else name)
    for pattern, repl, _ in MODEL_SPELLING_RULES[1:]:
        key = re.sub(pattern, repl, key)
    return key


def normalise_model_name(name: str) -> str:
    """Lower-case, and turn every run of characters other than [a-z0-9.] into one '-'."""
    return re.sub(r"[^a-z0-9.]+", "-", name.strip().lower()).strip("-")


def resolve_model_name(name: str) -> str:
    """Map a spelling ('LLAMA3.1_405B', 'GPT OSS 120B', 'DeepSeekV3 (dropless)') to a preset.

    Tries the normalised name, then the alias table, then both again with a trailing
    parenthesised run qualifier removed ('(tokendrop)', '(w/ MTP)'), which names how a run was
    configured, not the model's shape. Raises WorkloadError listing the valid names.
    """
    candidates = [name, re.sub(r"\s*\(.*\)\s*$", "", name)]
    for candidate in candidates:
        for key in (normalise_model_name(candidate), canonical_model_name(candidate)):
            if key in MODEL_PRESETS:
                return key
            if key in MODEL_ALIASES:
                return MODEL_ALIASES[key]
    raise WorkloadError(
        f"model = {name!r} is not a preset: use one of {', '.join(sorted(MODEL_PRESETS))} "
        "or a YAML file with ModelSpec fields"
    )


def get_model(name: str) -> ModelSpec:
    """The preset ModelSpec for a preset name or alias."""
    return MODEL_PRESETS[resolve_model_name(name)]


def load_model(path_or_mapping: str | Path | Mapping[str, Any]) -> ModelSpec:
    """A ModelSpec from a YAML file path or a mapping of ModelSpec fields.

    A mapping with only `preset: <name>` plus overrides starts from that preset.
    """
    data = _read_mapping(path_or_mapping) if not isinstance(path_or_mapping, Mapping) \
        else dict(path_or_mapping)
    if "preset" in data:
        base = get_model(str(data.pop("preset")))
        return model_from_mapping({**dataclasses.asdict(base), **data})
    if "hf_config" in data:  # model: {hf_config: path/to/config.json, <ModelSpec overrides>}
        base = model_from_hf_config(str(data.pop("hf_config")), name=data.pop("name", None))
        return model_from_mapping({**dataclasses.asdict(base), **data})
    return model_from_mapping(data)


def model_from_mapping(data: Mapping[str, Any]) -> ModelSpec:
    """Build a ModelSpec from plain data, naming unknown or missing keys in the error."""
    fields = {f.name for f in dataclasses.fields(ModelSpec)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise WorkloadError(
            f"model keys {unknown} are not ModelSpec fields: use only {', '.join(sorted(fields))}"
        )
    required = {f.name for f in dataclasses.fields(ModelSpec)
                if f.default is dataclasses.MISSING}
    missing = sorted(required - set(data))
    if missing:
        raise WorkloadError(f"model {data.get('name', '?')!r} lacks keys {missing}: add them")
    try:
        return ModelSpec(**data)
    except TypeError as exc:
        raise WorkloadError(f"model {data.get('name', '?')!r}: {exc}") from exc


def _read_mapping(path: str | Path) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise WorkloadError(
            f"model file {str(file)!r} does not exist: give a YAML path or a preset name"
        )
    try:
        data = yaml.load(file.read_text(), Loader=_LOADER)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "syntax error"
        raise WorkloadError(
            f"model file {str(file)!r} is not valid YAML ({first}): fix the syntax"
        ) from exc
    if not isinstance(data, dict):
        raise WorkloadError(f"model file {str(file)!r} must hold a mapping of ModelSpec fields")
    return data


class PresetFiles(Mapping[str, ModelSpec]):
    """Preset name (file stem) -> ModelSpec of the YAML files in one folder, each file read and
    checked on its first lookup (a command that needs one model reads one file, not 65): a
    read-only mapping with a dict's lookups, order (sorted file names), ``KeyError`` and identity
    (the same ModelSpec on every lookup)."""

    def __init__(self, directory: Path) -> None:
        self._files: dict[str, Path] = {f.stem: f for f in sorted(directory.glob("*.yaml"))}
        self._specs: dict[str, ModelSpec] = {}

    def __getitem__(self, name: str) -> ModelSpec:
        spec = self._specs.get(name)
        if spec is None:
            file = self._files[name]
            spec = model_from_mapping(_read_mapping(file))
            if spec.name != file.stem:
                raise WorkloadError(f"preset file {file.name}: name {spec.name!r} must equal the file stem")
            spec = self._specs.setdefault(name, spec)  # the first one read stays (identity)
        return spec

    def __contains__(self, name: object) -> bool:
        return name in self._files

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)

    def __repr__(self) -> str:
        return f"PresetFiles({len(self)} presets, {len(self._specs)} read)"


MODEL_PRESETS: Mapping[str, ModelSpec] = PresetFiles(PRESET_DIR)
"""Every bundled preset by name (``PresetFiles``: a file is read when its preset is first looked up)."""
