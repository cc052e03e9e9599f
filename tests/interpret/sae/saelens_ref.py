"""SAELens 6.51's own SAE classes, imported for the parity tests (a test dependency only).

Why the stubs: sae-lens 6.51.1 was written against TransformerLens 3. Its SAE modules import
`transformer_lens.HookedTransformer.HookedRootModule` (only the base class they subclass), and its
package `__init__` also imports the TransformerLens-3 model classes (HookedTransformer,
components.mlps...) for its training runner and its HookedSAETransformer. TransformerLens 4
removed those modules; `HookedRootModule` itself lives on as `transformer_lens.HookedRootModule`.
So, here and never in glassformer:

- `transformer_lens.HookedTransformer` is given as a module holding TL4's HookedRootModule (the
  only name the SAE classes use), with placeholders for the model classes only named in hints;
- `sae_lens` is entered as a bare package over its real folder, so its `__init__` (the runners,
  the TL3 model wrappers) is not run, and the two architectures tested here are registered as
  that `__init__` registers them (`register_sae_class`, `register_sae_training_class`).

`sae_lens()` returns a namespace with StandardTrainingSAE(Config), TopKTrainingSAE(Config),
TrainStepInput and SAE (for `SAE.load_from_disk`), or skips the test when sae_lens or torch is
missing.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import sys
import types

import pytest


class _RemovedInTransformerLens4:
    """Placeholder for a TransformerLens-3 class that sae_lens names but these tests never use."""


def _module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def _enter_sae_lens_package() -> None:
    """Give sae_lens the module names it imports from TransformerLens 3, and enter its package
    without running its __init__ (see the module docstring)."""
    if "sae_lens" in sys.modules:
        return
    transformer_lens = pytest.importorskip("transformer_lens")
    spec = importlib.util.find_spec("sae_lens")
    if spec is None:
        pytest.skip("sae_lens is not installed (pip install -e '.[test]')")
    if importlib.util.find_spec("transformer_lens.HookedTransformer") is None:
        # TransformerLens 4 has no module transformer_lens.HookedTransformer: name one
        legacy = _module("transformer_lens.HookedTransformer",
                         HookedRootModule=transformer_lens.HookedRootModule,
                         HookedTransformer=_RemovedInTransformerLens4,
                         Loss=_RemovedInTransformerLens4, Output=_RemovedInTransformerLens4)
        transformer_lens.HookedTransformer = legacy
    package = _module("sae_lens", __version__=importlib.metadata.version("sae-lens"),
                      logger=logging.getLogger("sae_lens"))
    package.__path__ = list(spec.submodule_search_locations)


def sae_lens() -> types.SimpleNamespace:
    pytest.importorskip("torch")
    _enter_sae_lens_package()
    from sae_lens.registry import (SAE_CLASS_REGISTRY, register_sae_class,
                                   register_sae_training_class)
    from sae_lens.saes.sae import SAE, TrainStepInput
    from sae_lens.saes.standard_sae import (StandardSAE, StandardSAEConfig, StandardTrainingSAE,
                                            StandardTrainingSAEConfig)
    from sae_lens.saes.topk_sae import (TopKSAE, TopKSAEConfig, TopKTrainingSAE,
                                        TopKTrainingSAEConfig)
    if "standard" not in SAE_CLASS_REGISTRY:
        register_sae_class("standard", StandardSAE, StandardSAEConfig)
        register_sae_training_class("standard", StandardTrainingSAE, StandardTrainingSAEConfig)
        register_sae_class("topk", TopKSAE, TopKSAEConfig)
        register_sae_training_class("topk", TopKTrainingSAE, TopKTrainingSAEConfig)
    return types.SimpleNamespace(
        SAE=SAE, TrainStepInput=TrainStepInput,
        StandardTrainingSAE=StandardTrainingSAE, StandardTrainingSAEConfig=StandardTrainingSAEConfig,
        TopKTrainingSAE=TopKTrainingSAE, TopKTrainingSAEConfig=TopKTrainingSAEConfig)
