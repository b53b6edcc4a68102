"""Model presets: every YAML loads and cites a source; published-run names resolve."""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from clustersim.workloads import (
    MODEL_PRESETS, TrainingSpec, WorkloadError, get_model, load_model, model_flops_per_step, resolve_model_name,
)
from clustersim.workloads.presets import MODEL_ALIASES, PRESET_DIR

RUNS = Path(__file__).resolve().parents[2] / "workloads" / "data" / "published_runs.csv"
# Hybrid Mamba models without a citable config (Nemotron-3 Super/Ultra/3.5 Lightning) and
# unpublished (DeepSeek-V4) shapes are deliberately not presets; Nemotron_3_Nano is one.
NOT_PRESETS = ("Nemotron_3_Ultra", "Nemotron_3_5", "DeepSeekV4")


def test_every_yaml_is_a_preset_with_a_source() -> None:
    files = sorted(PRESET_DIR.glob("*.yaml"))
    assert len(files) == len(MODEL_PRESETS) >= 45
    for file in files:
        data = yaml.safe_load(file.read_text())
        assert data["name"] == file.stem
        assert len(data["source"]) > 20, file.name


def test_published_run_models_resolve_to_presets_of_the_same_shape() -> None:
    runs = pd.read_csv(RUNS)
    for _, row in runs.drop_duplicates("model").iterrows():
        if row.model.startswith(NOT_PRESETS):
            with pytest.raises(WorkloadError):
                get_model(row.model)
            continue
        spec = get_model(row.model)
        for column, field in [("num_layers", "num_layers"), ("hidden_size", "hidden_size"),
                              ("num_heads", "num_heads"), ("ffn_hidden_size", "ffn_hidden_size"),
                              ("vocab_size", "vocab_size"), ("num_kv_heads", "num_kv_heads")]:
            if pd.notna(row[column]):
                assert getattr(spec, field) == int(row[column]), (row.model, field)


@pytest.mark.parametrize(("alias", "preset"), [
    ("LLAMA3.1_405B", "llama3-405b"), ("LLAMA3_70B", "llama3-70b"), ("MPT-7b", "mpt-7b"),
    ("Qwen3_30B_a3B", "qwen3-30b-a3b"), ("GPT OSS 120B", "gpt-oss-120b"),
    ("DeepSeekV3", "deepseek-v3"), ("Kimi_K2", "kimi-k2"), ("Nemotron4-340B", "nemotron-4-340b"),
    ("GPT3-175B", "gpt3-175b"), ("LLAMA2-7B", "llama2-7b"),
    ("DeepSeekV3 (tokendrop)", "deepseek-v3"),
    ("megatron-530b", "gpt-529.6b"), ("megatron-1t", "gpt-1008.0b"), ("Llama3.1-8B", "llama3-8b"),
    ("Grok1 314b", "grok-1"), ("Grok 1 314b", "grok-1"), ("Deepseek V3", "deepseek-v3"),
])
def test_aliases(alias: str, preset: str) -> None:
    assert resolve_model_name(alias) == preset
    assert get_model(alias) is MODEL_PRESETS[preset]


def test_aliases_point_at_presets() -> None:
    assert set(MODEL_ALIASES.values()) <= set(MODEL_PRESETS)


def test_megatron_gpt_family_sizes_match_their_names() -> None:
    # Narayanan et al. SC'21 Table 1 prints each model's parameter count (billions) as its name;
    # those are rounded to 3-4 significant digits (1.7 for 1.65B), hence 3%.
    for name in ("gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "gpt-18.4b", "gpt-39.1b", "gpt-76.1b",
                 "gpt-145.6b", "gpt-310.1b", "gpt-529.6b", "gpt-1008.0b", "gpt-177b", "gpt-462b"):
        billions = float(name.removeprefix("gpt-").removesuffix("b"))
        assert get_model(name).num_params() / 1e9 == pytest.approx(billions, rel=0.03), name


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(WorkloadError, match="llama3-8b") as info:
        get_model("llama9-1t")
    assert "\n" not in str(info.value)


def test_load_model_from_mapping_file_and_preset_override(tmp_path: Path) -> None:
    spec = load_model({"preset": "llama3-8b", "num_layers": 4, "name": "llama3-8b-4l"})
    assert spec.num_layers == 4 and spec.hidden_size == 4096
    file = tmp_path / "m.yaml"
    file.write_text(yaml.safe_dump({**spec.__dict__}))
    assert load_model(file) == spec
    assert load_model(str(PRESET_DIR / "tiny.yaml")) == get_model("tiny")


@pytest.mark.parametrize(("content", "message"), [
    ("name: x\nnum_layers: 2\n", "lacks keys"),
    ("name: x\nbogus_field: 1\n", "bogus_field"),
    ("name: [unclosed\n", "not valid YAML"),
    ("- a\n- b\n", "mapping"),
])
def test_bad_model_files_give_one_line_errors(tmp_path: Path, content: str, message: str) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(content)
    with pytest.raises(WorkloadError, match=message) as info:
        load_model(file)
    assert "\n" not in str(info.value)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="does not exist"):
        load_model(tmp_path / "nope.yaml")


def test_presets_are_read_on_first_lookup_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``PresetFiles`` reads one file per preset looked up, once; keys, order, membership and
    ``KeyError`` are a dict's; every bundled preset loads under its file's name."""
    from clustersim.workloads import presets

    reads: list[str] = []
    real = presets._read_mapping
    monkeypatch.setattr(presets, "_read_mapping", lambda path: reads.append(Path(path).stem) or real(path))
    files = presets.PresetFiles(PRESET_DIR)
    assert list(files) == [f.stem for f in sorted(PRESET_DIR.glob("*.yaml"))] and len(files) == len(MODEL_PRESETS)
    assert "llama3-70b" in files and "no-such-model" not in files and reads == []
    assert files["llama3-70b"] is files["llama3-70b"] and reads == ["llama3-70b"]
    with pytest.raises(KeyError):
        files["no-such-model"]
    assert all(spec.name == name for name, spec in files.items())
    assert dict(files.items()) == {name: MODEL_PRESETS[name] for name in MODEL_PRESETS}
    (tmp_path / "wrong.yaml").write_text((PRESET_DIR / "tiny.yaml").read_text())
    bad = presets.PresetFiles(tmp_path)
    assert list(bad) == ["wrong"]
    with pytest.raises(WorkloadError, match="wrong.yaml: name 'tiny' must equal the file stem"):
        bad["wrong"]


def test_nemotron_4_15b_matches_its_report_and_the_printed_model_flops() -> None:
    # 15.6B parameters (Parmar et al. 2024, abstract); NVIDIA's DGX Cloud Benchmarking README prints
    # the model FLOPs of one 4096-token sequence as 3.85e14 (workloads/data/published_runs_dgxc.csv)
    model = get_model("nemotron-4-15b")
    assert model.num_params() == pytest.approx(15.6e9, rel=0.01)
    flops = model_flops_per_step(model, TrainingSpec(seq_len=4096, global_batch_size=1, precision="bf16"))
    assert flops == pytest.approx(3.85e14, rel=0.005)


def test_llama4_maverick_matches_the_printed_model_flops() -> None:
    # NVIDIA's DGX Cloud Benchmarking llama4 README prints the model FLOPs of one 8192-token sequence
    # as 8.92e14 (workloads/data/published_runs_dgxc.csv): active parameters (one routed expert of
    # 128 plus the shared one on the 24 odd layers, dense MLPs on the even ones) with the causal
    # attention term, the Megatron-Bridge convention; full attention would give 11 % more
    model = get_model("llama4-maverick")
    training = TrainingSpec(seq_len=8192, global_batch_size=1, precision="bf16")
    assert model_flops_per_step(model, training, causal_attention=True) == pytest.approx(8.92e14, rel=0.005)
    assert model_flops_per_step(model, training) > 1.1 * 8.92e14
