# The config library's sources, relative to the project root: the typed job schema, loading,
# overrides, validation, import (no torch). One list for the main build (accel_config) and the
# clang fuzzing sub-build (tests/fuzz), so a new config file is fuzzed as soon as it is built.
set(ACCEL_CONFIG_SOURCES
  runtime/common/errors.cpp
  runtime/config/schema.cpp
  runtime/config/schema_fields.cpp
  runtime/config/yaml_reader.cpp
  runtime/config/job_builder.cpp
  runtime/config/import_common.cpp
  runtime/config/overrides.cpp
  runtime/config/validate.cpp
  runtime/config/dump.cpp
  runtime/config/suggest.cpp
  runtime/config/job_loader.cpp
  runtime/config/default_keys.cpp
  runtime/config/import_accelerate.cpp
  runtime/config/import_deepspeed.cpp
  runtime/config/backend_translation.cpp
  runtime/config/translate_to_fsdp.cpp
  runtime/config/translate_to_deepspeed.cpp
  runtime/config/job_convert.cpp
  runtime/config/questionnaire.cpp
  runtime/config/paths.cpp
  runtime/config/placement.cpp
  runtime/config/json_reader.cpp
  runtime/config/deepspeed_keys.cpp
  runtime/config/plan/resolved_plan.cpp
  runtime/config/plan/resolve_plan.cpp
  runtime/config/plan/unit_grouping.cpp
  runtime/config/plan/engine_units.cpp
  runtime/config/dialects/builtin_dialects.cpp
  runtime/config/dialects/ddp/resolve_ddp.cpp
  runtime/config/dialects/deepspeed/resolve_deepspeed.cpp
  runtime/config/dialects/fsdp/resolve_fsdp.cpp
  runtime/config/model_section.cpp
  runtime/config/machine_range.cpp
  runtime/config/elastic_rules.cpp
  runtime/config/rdzv_endpoint.cpp
  runtime/hf/hf_family.cpp
  runtime/hf/hf_folder.cpp
  runtime/hf/hf_config.cpp
  runtime/config/model_record.cpp
  # Last: a file added before the end shifts the unity batches (translate_to_* share helper names).
  runtime/common/safe_file.cpp
)
