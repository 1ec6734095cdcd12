"""Load a study file and validate it against this installation (its platforms, workloads, probes
and host); every mistake becomes one line naming file, field and fix."""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from isobench.design import Design, resolve, resolved_text, with_budget
from isobench.errors import UserError
from isobench.hostinfo import format_cpu_list, host_cpus
from isobench.platforms.runsc import KEPT_BOOKWORM_RUNSC, runtime_path_problem
from isobench.study.model import DEFAULT_MAX_CELLS, Knobs, PlatformEntry, Study, knob_combinations
from isobench.text import clip

DEFAULT_STUDY = "default"
#: a study file larger than this is not a study (and would be read into memory whole)
MAX_STUDY_BYTES = 1 << 20
#: values a study may hold once YAML aliases are expanded: an alias bomb is refused before
#: validation walks it (pydantic would copy every expanded value)
MAX_YAML_NODES = 200_000
#: labels and from_platform values become parts of paths (results, artifacts, container names)
MAX_NAME_LENGTH = 64
#: parameters whose values name a platform entry, and so a directory
PATH_PARAMS = ("from_platform",)
# Docker's image reference grammar: [registry[:port]/]path[:tag][@digest]; never starts with "-".
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_RE = re.compile(rf"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?/)?{_IMAGE_COMPONENT}"
                       rf"(?:/{_IMAGE_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                       r"(?:@sha256:[0-9a-f]{64})?$")
MAX_IMAGE_LENGTH = 255


def _field_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + str(part)
    return path


def _fix_for(error: dict[str, Any]) -> str:
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == "greater_than":
        return f"use a value greater than {ctx.get('gt')}"
    if kind == "greater_than_equal":
        return f"use a value of at least {ctx.get('ge')}"
    if kind in ("less_than", "less_than_equal"):
        return f"use a value of at most {ctx.get('le', ctx.get('lt'))}"
    if kind == "extra_forbidden":
        return "remove it, or check its spelling (see `isobench workloads` and the README)"
    if kind == "missing":
        return "add it"
    if kind == "literal_error":
        return f"use {ctx.get('expected')}"
    if kind == "too_short":
        return "list at least one entry"
    if kind == "string_pattern_mismatch":
        return "use letters, digits, '.', '_' or '-'"
    return "see the README's 'Study files' section"


def _from_validation(err: ValidationError, file: str, prefix: str = "") -> UserError:
    first = err.errors()[0]
    field = _field_path(tuple(first["loc"]))
    if prefix:
        field = f"{prefix}.{field}" if field else prefix
    message = first["msg"].removeprefix("Value error, ")
    fix = _fix_for(first)
    if "; fix: " in message:  # our own validators carry their fix
        message, fix = message.split("; fix: ", 1)
    value = first.get("input")
    if first["type"] not in ("missing",) and not isinstance(value, dict | list):
        message = f"{clip(message, 200)} (got {clip(repr(value), 80)})"  # one short line, whatever the input
    return UserError(message, file=file, field=field or None, fix=fix)


def _from_value_error(err: ValueError, file: str, field: str | None) -> UserError:
    """A whole-study check's ValueError("problem; fix: ...") as the one-line error a schema error gives."""
    message, _, fix = str(err).partition("; fix: ")
    return UserError(message, file=file, field=field, fix=fix or _fix_for({"type": "value_error"}))


def _from_field_error(err: ValueError, file: str, prefix: str, fix_separator: str, where: str = "") -> UserError:
    """A plugin's ValueError("name: problem<fix_separator>fix") as the one-line error on field
    ``prefix.name`` (``where`` follows the problem)."""
    message, _, fix = str(err).partition(fix_separator)
    name, _, problem = message.partition(": ")
    fix = fix.removesuffix(")") if fix_separator.startswith(" (") else fix
    return UserError(f"{problem or name}{where}", file=file, field=f"{prefix}.{name}" if problem else prefix,
                     fix=fix or None)


def _check_cross_field(study: Study, file: str) -> None:
    """Checks that need the probe registry and the plan's rules, in the order the schema ran them."""
    from isobench.plan.duet import validate_duet
    from isobench.plan.tenants import validate_tenants
    from isobench.probes.session import validate_probe_config

    try:
        if study.probes is not None:
            validate_probe_config(study.probes)
    except ValueError as err:
        raise _from_value_error(err, file, "probes") from None
    try:
        validate_tenants(study)
        validate_duet(study)
    except ValueError as err:
        raise _from_value_error(err, file, None) from None


def _pass_allow_emulation(study: Study) -> None:
    """Copy the study's ``allow_emulation`` into the options of the platforms that take it
    (the VMs), so that a cell, which carries its platform entry, can run on its own."""
    if study.allow_emulation:
        from isobench.platforms import PLATFORMS

        for entry in study.platforms:
            if entry.name in PLATFORMS and getattr(PLATFORMS.get(entry.name), "takes_allow_emulation", False):
                entry.options.setdefault("allow_emulation", True)


def _check_knobs(values: dict[str, Any], file: str, field: str, check_host: bool) -> None:
    cpus = host_cpus()
    for knob, value in values.items():
        if isinstance(value, list) and not value:
            raise UserError("an empty sweep list", file=file, field=f"{field}.{knob}",
                            fix="give at least one value")
    for combo in knob_combinations(values):
        try:
            knobs = Knobs(**combo)
        except ValidationError as err:
            raise _from_validation(err, file, field) from None
        if not check_host:
            continue
        from isobench.plan.placement import resolve_knobs

        resolve_knobs({k: v for k, v in combo.items() if v is not None}, field, file)
        if knobs.cpus is not None and knobs.cpus > len(cpus):
            raise UserError(f"{knobs.cpus} cores asked for, this host has {len(cpus)}", file=file,
                            field=f"{field}.cpus", fix=f"use a value up to {len(cpus)}")
        wanted = knobs.cpuset_list() or []
        have = set(cpus)
        missing = [c for c in wanted if c not in have]
        if missing:  # ranges, and at most a few of them: "0-100000" must not flood the terminal
            raise UserError(f"cpuset names core(s) {format_cpu_list(missing)} that this host lacks", file=file,
                            field=f"{field}.cpuset", fix=f"use cores among {format_cpu_list(cpus)}")


def name_problem(value: str) -> str | None:
    """Why ``value`` cannot be a label (a path part, a container name, a line of output), or None."""
    if len(value) > MAX_NAME_LENGTH:
        return f"is {len(value)} characters long"
    if "/" in value:
        return "holds a path separator"
    if ".." in value:
        return "holds '..'"
    bad = next((ch for ch in value if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")), None)
    if bad is not None:  # NUL, escapes, newlines, U+202E and other invisible or reordering characters
        return f"holds the control character U+{ord(bad):04X}"
    return None


_NAME_FIX = (f"use at most {MAX_NAME_LENGTH} visible characters, without '/', '..' or control characters, "
             "e.g. letters, digits, '.', '_' and '-'")


def _check_names(study: Study, file: str) -> None:
    """Labels and from_platform values become path parts: refuse what could leave the results directory."""
    named: list[tuple[str, Any]] = []
    for what, entries in (("workloads", study.workloads), ("platforms", study.platforms)):
        for index, entry in enumerate(entries):
            if entry.label is not None:
                named.append((f"{what}[{index}].label", entry.label))
    for index, entry in enumerate(study.workloads):
        for param in PATH_PARAMS:
            if param in entry.params:
                named.append((f"workloads[{index}].params.{param}", entry.params[param]))
            for position, value in enumerate(entry.sweep.get(param, [])):
                named.append((f"workloads[{index}].sweep.{param}[{position}]", value))
    for field, value in named:
        if value is None:
            continue
        problem = "is not a string" if not isinstance(value, str) else name_problem(value)
        if problem:
            raise UserError(f"{clip(repr(value), 60)} {problem}", file=file, field=field, fix=_NAME_FIX)
    for index, entry in enumerate(study.platforms):
        if entry.image is not None and (len(entry.image) > MAX_IMAGE_LENGTH or not _IMAGE_RE.match(entry.image)):
            # the image goes on the engine's command line: "--privileged" must never read as a flag
            raise UserError(f"{clip(repr(entry.image), 60)} is not an image reference", file=file,
                            field=f"platforms[{index}].image",
                            fix="name an image like `registry.example/team/torch:2.4` or `name@sha256:<digest>`")


def cell_count(study: Study) -> int:
    """Cells the study expands to (every sweep and knob product), counted without expanding it."""
    variants = sum(math.prod(len(values) for values in entry.sweep.values()) for entry in study.workloads)
    groups = sum(math.prod(len(v) if isinstance(v, list) else 1 for v in {**study.knobs, **p.knobs}.values())
                 for p in study.platforms)
    return variants * groups * (study.warmup + study.initial_repetitions)


def _check_size(study: Study, file: str) -> None:
    cells = cell_count(study)
    if cells > study.max_cells:
        field = "max_cells" if study.max_cells != DEFAULT_MAX_CELLS else "workloads"
        raise UserError(f"the study expands to {cells:,} cells, above the limit of {study.max_cells:,}", file=file,
                        field=field, fix="shrink the sweeps, knob lists or repetitions, or raise the limit "
                                         "with `max_cells:` at the study's top level")


def validate_study(raw: Any, file: str, check_host: bool = True) -> Study:
    """Validate a study; ``check_host=False`` skips what depends on this host (core counts),
    for reading a stored study on another machine."""
    from isobench.platforms import PLATFORMS
    from isobench.workloads import WORKLOADS

    if not isinstance(raw, dict):
        raise UserError("the study must be a YAML mapping", file=file,
                        fix="start with `name:`, `workloads:` and `platforms:`")
    bad_key = next((k for k in raw if not isinstance(k, str)), None)
    if bad_key is not None:
        raise UserError(f"the key {clip(repr(bad_key), 40)} is not a name", file=file,
                        fix="write the study's keys as words such as `name:` or `workloads:`")
    try:
        study = Study(**raw)
    except ValidationError as err:
        raise _from_validation(err, file) from None
    except TypeError as err:
        raise UserError(clip(str(err), 200), file=file, fix="check the study's top-level keys") from None
    _check_cross_field(study, file)
    _pass_allow_emulation(study)
    _check_names(study, file)
    _check_size(study, file)  # before anything walks the sweeps' product

    for index, entry in enumerate(study.workloads):
        field = f"workloads[{index}]"
        if entry.name not in WORKLOADS:
            raise UserError(f"unknown workload {entry.name!r}", file=file, field=f"{field}.name",
                            fix=f"use one of {', '.join(WORKLOADS.names())} (see `isobench workloads`)")
        params_cls = WORKLOADS.get(entry.name).Params
        sweep_keys = sorted(entry.sweep)
        for values in itertools.product(*(entry.sweep[k] for k in sweep_keys)):
            params = {**entry.params, **dict(zip(sweep_keys, values, strict=True))}
            try:
                parsed = params_cls(**params)
            except ValidationError as err:
                raise _from_validation(err, file, f"{field}.params") from None
            if check_host:  # e.g. the user's script must exist here; not when reading stored results
                try:
                    WORKLOADS.get(entry.name).check_host(parsed)
                except ValueError as err:
                    raise _from_field_error(err, file, f"{field}.params", "; fix: ") from None

    _check_knobs(study.knobs, file, "knobs", check_host)
    for index, entry in enumerate(study.platforms):
        field = f"platforms[{index}]"
        if entry.name not in PLATFORMS:
            raise UserError(f"unknown platform {entry.name!r}", file=file, field=f"{field}.name",
                            fix=f"use one of {', '.join(PLATFORMS.names())} (see `isobench platforms`)")
        _check_knobs({**study.knobs, **entry.knobs}, file, f"{field}.knobs", check_host)
        _check_runtime_fields(entry, PLATFORMS.get(entry.name), file, field, check_host)
        kernel = entry.options.get("kernel")
        if kernel is not None and check_host:  # a VM boots it as root: only a kernel image will do
            from isobench.platforms.guest import kernel_problem

            problem = kernel_problem(kernel)
            if problem:
                raise UserError(f"{clip(repr(kernel), 60)} {problem}", file=file, field=f"{field}.options.kernel",
                                fix="name a Linux kernel image (bzImage or vmlinux), or leave `kernel` out "
                                    "for Debian's")
        try:
            PLATFORMS.get(entry.name).validate_entry(entry)
            for combo in knob_combinations({**study.knobs, **entry.knobs}):
                PLATFORMS.get(entry.name).validate_knobs(combo)
        except ValueError as err:
            raise UserError(str(err), file=file, field=field) from None

    _check_platform_workloads(study, file)
    keys = [p.key for p in study.platforms]
    if study.baseline not in keys:
        raise UserError(f"baseline {study.baseline!r} names no platform entry", file=file,
                        field="baseline", fix=f"use one of {', '.join(keys)}")
    return study


def _check_runtime_fields(entry: PlatformEntry, cls: Any, file: str, field: str, check_host: bool) -> None:
    """``platform:`` (gvisor only) and ``runtime_path:`` (oci and gvisor): on the entries that take
    them, and a runtime binary that exists here (not checked when reading stored results)."""
    if entry.platform is not None and not cls.takes_runsc_platform:
        raise UserError(f"{entry.name} takes no runsc platform (only gvisor entries do)", file=file,
                        field=f"{field}.platform", fix="remove `platform`, or use `name: gvisor`")
    if entry.runtime_path is None:
        return
    if not cls.takes_runtime_path:
        raise UserError(f"{entry.name} takes no runtime binary (only oci and gvisor entries do)", file=file,
                        field=f"{field}.runtime_path", fix="remove `runtime_path`, or use `name: oci` or `gvisor`")
    problem = runtime_path_problem(entry.runtime_path) if check_host else None
    if problem:
        raise UserError(f"{clip(repr(entry.runtime_path), 80)} {problem}", file=file, field=f"{field}.runtime_path",
                        fix="name the absolute path of an executable runtime build (e.g. Debian 12's runsc, "
                            f"which ./isobench.sh setup keeps at {KEPT_BOOKWORM_RUNSC}), or remove `runtime_path`")


def _check_platform_workloads(study: Study, file: str) -> None:
    """Each platform entry can run each workload's parameters (every sweep value): e.g. an entry
    that passes no GPU in refuses `device: cuda` here, before any cell starts."""
    from isobench.platforms import PLATFORMS
    from isobench.workloads import WORKLOADS
    from isobench.workloads.base import WORKLOAD_KNOBS

    for w_index, workload in enumerate(study.workloads):
        own = WORKLOADS.get(workload.name).own_knobs
        for p_index, entry in enumerate(study.platforms):
            ignored = sorted((set(study.knobs) | set(entry.knobs)) & (WORKLOAD_KNOBS - own))
            if ignored:
                knob = ignored[0]
                where = f"platforms[{p_index}].knobs" if knob in entry.knobs else "knobs"
                raise UserError(f"{knob} is carried out only by workloads that name it ({workload.name} would run "
                                "without it)", file=file, field=f"{where}.{knob}",
                                fix=f"set it only in a study whose workloads all take it, or remove {workload.key}")
        sweep_keys = sorted(workload.sweep)
        for values in itertools.product(*(workload.sweep[k] for k in sweep_keys)):
            params = {**workload.params, **dict(zip(sweep_keys, values, strict=True))}
            for p_index, entry in enumerate(study.platforms):
                try:
                    PLATFORMS.get(entry.name).validate_workload(entry, params)
                except ValueError as err:
                    raise _from_field_error(err, file, f"platforms[{p_index}]", " (fix: ",
                                            f" (workloads[{w_index}], {workload.key})") from None


def expanded_size(raw: Any, limit: int) -> int:
    """Values in ``raw`` with every YAML alias expanded (shared objects counted each time they
    are reached), in time linear in the document; ValueError for an alias cycle. Stops past ``limit``."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()

    def size(value: Any) -> int:
        if not isinstance(value, dict | list):
            return 1
        key = id(value)
        if key in sizes:
            return sizes[key]
        if key in visiting:
            raise ValueError("a YAML alias refers to a value that contains it")
        visiting.add(key)
        children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        total = 1
        for child in children:
            total += size(child)
            if total > limit:
                break
        visiting.discard(key)
        sizes[key] = total
        return total

    return size(raw)


def parse_study_yaml(text: str, file: str) -> Any:
    """The study text as YAML values, with its size and alias expansion bounded."""
    if len(text) > MAX_STUDY_BYTES:
        raise UserError(f"the file holds {len(text):,} characters, above the {MAX_STUDY_BYTES:,} a study may have",
                        file=file, fix="write sweeps as lists of values, not as generated cell lists")
    try:
        raw = yaml.safe_load(text)
    except RecursionError:
        raise UserError("the YAML nests too deeply", file=file, fix="flatten the file's lists and mappings") \
            from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        problem = getattr(err, "problem", None) or "malformed YAML"
        raise UserError(f"malformed YAML at {where}: {clip(problem, 120)}", file=file,
                        fix="check indentation and quoting there") from None
    try:
        nodes = expanded_size(raw, MAX_YAML_NODES)
    except (ValueError, RecursionError) as err:
        raise UserError(str(err) if isinstance(err, ValueError) else "the YAML nests too deeply", file=file,
                        fix="write the values out instead of using anchors and aliases (& and *)") from None
    if nodes > MAX_YAML_NODES:  # e.g. the "billion laughs": nested aliases that multiply
        raise UserError(f"the YAML expands to more than {MAX_YAML_NODES:,} values (through & anchors and * aliases)",
                        file=file, fix="write the values out instead of nesting anchors and aliases")
    return raw


def load_study_text(text: str, file: str, check_host: bool = True) -> Study:
    """The study as written (the schema's defaults for what it leaves out); see resolve_study_text
    for the study a run plans."""
    return validate_study(parse_study_yaml(text, file), file, check_host)


def resolve_study_text(text: str, file: str, budget: str | None = None) -> tuple[Study, str, Design]:
    """The study a run plans: the resolving design filled in where the study writes no design
    field (design.py), ``budget`` (``--budget``) in force. Returns the study, the text to store
    and run (the original when nothing was filled in) and the design."""
    original = parse_study_yaml(text, file)
    written = validate_study(original, file)  # the study's own fields are checked as written first
    raw = original
    if budget is not None:
        raw = with_budget(original, budget, file)
        written = validate_study(raw, file)
    resolved, design = resolve(raw, written, host_cpus())
    study = written if resolved == raw else validate_study(resolved, file)
    study._design = design
    return study, resolved_text(original, resolved, design, text), design


def default_study_text() -> str:
    return resources.files("isobench.studies").joinpath(f"{DEFAULT_STUDY}.yaml").read_text()


def builtin_studies() -> list[str]:
    return sorted(p.name.removesuffix(".yaml") for p in resources.files("isobench.studies").iterdir()
                  if p.name.endswith(".yaml"))


def load_study(path: str | Path | None, budget: str | None = None) -> tuple[Study, str, str]:
    """Return (study, the text to run, the name to show for the file): the resolving design is
    filled in where the study writes none (resolve_study_text)."""
    study, text, name = load_study_as_written(path)
    study, text, _ = resolve_study_text(text, name, budget)
    return study, text, name


def with_budget_text(text: str, file: str, budget: str | None) -> str:
    """The study text with ``--budget`` written into it (unchanged without one); the runner fills
    in the rest of the design, and records how."""
    if budget is None:
        return text
    raw = with_budget(parse_study_yaml(text, file), budget, file)
    validate_study(raw, file)
    return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, width=120)


def load_study_as_written(path: str | Path | None) -> tuple[Study, str, str]:
    """Return (study, its source text, the name to show for the file), nothing filled in."""
    if path is None:
        path = DEFAULT_STUDY
    candidate = Path(path)
    if not candidate.exists() and str(path) in builtin_studies():
        name = f"<built-in study {path}>"
        text = resources.files("isobench.studies").joinpath(f"{path}.yaml").read_text()
        return load_study_text(text, name), text, name
    try:
        with candidate.open("rb") as fh:  # bounded: /dev/zero or a huge file is not read whole
            data = fh.read(MAX_STUDY_BYTES + 1)
        if len(data) > MAX_STUDY_BYTES:
            raise UserError(f"the file is larger than the {MAX_STUDY_BYTES:,} bytes a study may have",
                            file=str(path), fix="write sweeps as lists of values, not as generated cell lists")
        text = data.decode()
    except UnicodeDecodeError as err:
        raise UserError(f"not UTF-8 text (byte {err.start})", file=str(path),
                        fix="save the study as UTF-8 YAML") from None
    except FileNotFoundError:
        raise UserError("no such file", file=str(path),
                        fix=f"give a path to a YAML study, or one of {', '.join(builtin_studies())}") from None
    except OSError as err:
        raise UserError(f"cannot read it: {err.strerror}", file=str(path)) from None
    return load_study_text(text, str(path)), text, str(path)
