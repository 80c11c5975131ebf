"""Small helpers that keep the tools working on transformers 4.x and 5.x.

transformers 5 folded `rope_theta` / `rope_scaling` / `rotary_pct` into `rope_parameters` and
renamed `torch_dtype` to `dtype`; the tools build configs through these helpers so the same
script runs on either.
"""
import inspect


def _accepts(cls, name):
    try:
        return name in inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return False


def rope_kwargs(config_cls, theta, scaling=None, partial_rotary_factor=None):
    """Constructor kwargs that set RoPE base, optional scaling and partial rotary fraction."""
    if _accepts(config_cls, "rope_parameters"):
        params = {"rope_type": "default", "rope_theta": float(theta)}
        if scaling:
            params.update({k: v for k, v in scaling.items() if k != "rope_type"})
            params["rope_type"] = scaling["rope_type"]
        if partial_rotary_factor is not None:
            params["partial_rotary_factor"] = float(partial_rotary_factor)
        kwargs = {"rope_parameters": params}
        if partial_rotary_factor is not None and _accepts(config_cls, "rotary_pct"):
            kwargs["rotary_pct"] = float(partial_rotary_factor)
        return kwargs
    kwargs = {}
    if partial_rotary_factor is not None:  # GPT-NeoX on transformers 4.x
        kwargs["rotary_pct"] = float(partial_rotary_factor)
        kwargs["rotary_emb_base"] = float(theta)
    else:
        kwargs["rope_theta"] = float(theta)
    if scaling:
        kwargs["rope_scaling"] = dict(scaling)
    return kwargs


def from_pretrained_fp32(model_cls, path, attn="eager"):
    """Loads a checkpoint upcast to float32 with the plain (eager) attention."""
    import torch

    try:
        return model_cls.from_pretrained(path, dtype=torch.float32, attn_implementation=attn)
    except TypeError:
        return model_cls.from_pretrained(path, torch_dtype=torch.float32, attn_implementation=attn)
