"""The recipes' parameter schemas share one definition per parameter (recipes.params)."""

from __future__ import annotations

import importlib

import pytest

from recipes import params

RECIPES = ["digits_classifier", "ddp_train", "finetune", "evaluate"]


def test_training_recipes_reference_the_shared_blocks() -> None:
    schemas = {name: importlib.import_module(f"recipes.{name}").PARAM_SCHEMA for name in RECIPES}
    for name in ("lr", "eval_every", "warmup_steps", "weight_decay", "amp", "amp_dtype"):
        for recipe in ("digits_classifier", "ddp_train", "finetune"):
            assert schemas[recipe]["properties"][name] == params.BLOCKS[name], (recipe, name)
    # ddp_train is digits_classifier under DDP: the same parameters, two of them worded for ranks.
    ddp, digits = schemas["ddp_train"]["properties"], schemas["digits_classifier"]["properties"]
    assert list(ddp) == list(digits)
    assert [name for name in ddp if ddp[name] != digits[name]] == ["batch_size", "grad_accum"]
    for recipe in ("digits_classifier", "ddp_train", "finetune"):
        assert schemas[recipe]["x-divisible"] == params.BATCH_DIVISIBLE


def test_param_copies_and_refuses_keys_the_block_lacks() -> None:
    block = params.param("classes", default=[1, 2])
    block["items"]["maximum"] = 99
    assert params.BLOCKS["classes"]["items"]["maximum"] == 9 and params.BLOCKS["classes"]["default"][0] == 0
    with pytest.raises(KeyError, match="'lr' has no 'maximun'"):
        params.param("lr", maximun=2)


@pytest.mark.django_db
def test_the_portal_reads_a_built_schema_without_importing_the_recipe() -> None:
    import sys

    from apps.jobtemplates.recipes import recipe_param_schema

    sys.modules.pop("recipes.finetune", None)
    schema = recipe_param_schema(module="finetune")
    assert "recipes.finetune" not in sys.modules  # read in a child interpreter
    assert schema == importlib.import_module("recipes.finetune").PARAM_SCHEMA
    schema["title"] = "changed"
    again = recipe_param_schema(module="finetune")
    assert again is not None and again["title"] == "finetune parameters"
