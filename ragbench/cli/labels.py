"""``ragbench datasets generate / agreement / judge``: make a labeled set from documents, and
check how alike it ranks a sweep's trials to real labels or to grades given by hand."""

from __future__ import annotations

import argparse
import sys

from ragbench.cli.common import at_least_one, globs, json_arg, options
from ragbench.cli.spec import Arg, Command, Group
from ragbench.errors import ConfigError


class _Number(Arg):
    """A numeric option of ``generate``, parsed as text and converted by ``_numbers``, so that
    a bad value is a ``ConfigError`` naming its flag (exit 2, one line)."""

    __slots__ = ("kind",)

    def __init__(self, flag: str, metavar: str, kind: type[int | float], help: str) -> None:
        super().__init__(flag, metavar=metavar, help=help)
        self.kind = kind


def _numbers(args: argparse.Namespace) -> dict[str, int | float | None]:
    """generate's numeric options by name (None where not given)."""
    found: dict[str, int | float | None] = {}
    for arg in _GENERATE.arguments():
        if not isinstance(arg, _Number):
            continue
        name = arg.flags[0].removeprefix("--").replace("-", "_")
        text = getattr(args, name)
        try:
            found[name] = None if text is None else arg.kind(text)
        except ValueError:
            expected = "an integer" if arg.kind is int else "a number"
            raise ConfigError(f"{arg.flags[0]}: expected {expected}, got {text!r}") from None
    return found


def _generate(args: argparse.Namespace) -> int:
    from ragbench.data.generate import DEFAULT_LEVEL, build_method, generate
    from ragbench.text.loaders import skipped_summary

    numbers = _numbers(args)
    n, seed = numbers.pop("n"), numbers.pop("seed")
    method = build_method(
        args.method,
        base_url=args.base_url,
        model=args.model,
        credential=args.credential,
        llm_cache=args.llm_cache,
        embedder=json_arg("--embedder", args.embedder) if args.embedder else None,
        keep_numbers=args.keep_numbers or None,
        keep_references=args.keep_references or None,
        **numbers,
    )
    result = generate(
        args.corpus,
        args.out,
        method,
        n=50 if n is None else int(n),
        seed=int(seed or 0),
        level=args.level or DEFAULT_LEVEL,
        include=args.include,
        exclude=args.exclude,
    )
    if result.problems:
        print(skipped_summary(result.problems), file=sys.stderr)
    sys.stdout.write(f"{result}\n")
    return 0


def _agreement(args: argparse.Namespace) -> int:
    from ragbench.report.agreement import run_agreement

    found = run_agreement(
        args.config,
        args.real,
        args.synthetic,
        n_resamples=args.resamples,
        **options(args, ("metric", "out", "limit_queries", "overwrite", "seed")),
    )
    sys.stdout.write(f"{found.to_markdown()}\n")
    return 0


def _judge(args: argparse.Namespace) -> int:
    from ragbench.report.judged import JUDGED_SPLIT, JudgingSession, judged_agreement

    session = JudgingSession(args.set, args.run, n=args.queries, k=args.depth, seed=args.seed)
    out = sys.stdout
    out.write(session.start())
    while not session.done:
        out.flush()
        line = sys.stdin.readline()
        if line and not sys.stdin.isatty():  # piped answers: shown, so the output reads
            out.write(line if line.endswith("\n") else line + "\n")
        out.write(session.answer(line) if line else "\n" + session.quit())
    for run in args.run if args.agreement else ():
        found = judged_agreement(
            args.set, run, metric=args.metric, n_resamples=args.resamples, seed=args.seed
        )
        out.write(
            f"\nAgreement of {run} with the judged queries (real: split {JUDGED_SPLIT!r} of "
            f"{args.set}; synthetic: the generated labels the run evaluated)\n\n"
            f"{found.to_markdown()}\n"
        )
    return 0


_GENERATE_DESCRIPTION = """\
Sample places of CORPUS (round-robin over documents, then over their sections,
seeded), make a query of each until N of them are judged at the evaluation
--level, and write those N as a span-labeled set to --out that `ragbench
datasets validate` accepts (fewer, said in one line, when CORPUS has no more).
CORPUS is a file or folder of documents, or a labeled set (BEIR, span-labeled,
chunking_evaluation) whose documents are used.

methods:
  ict       (offline, the default) a sentence is the query (inverse cloze task):
            cut out of the set's corpus (cuts.jsonl), so only its context can
            find its document; span evidence is the --window sentences before
            and after it that share --evidence-terms terms with it. Skipped:
            headings, code, table rows, sentences that open by referring back
            (This, However, We, ...) and sentences with digits. A query whose
            context repeats most of its terms (--repeated-share) is judged at
            the chunk and span levels only: it would find its document by them
  headings  (offline; Markdown and HTML) a heading is the query, cut out of the
            corpus; its section's body the evidence; generic headings and short
            sections are skipped
  llm       a chat model writes a question, verbatim excerpts of the passage
            that answer it (located exactly, whitespace-normalised or fuzzily)
            and a reference answer; near-duplicate questions are removed;
            every call is cached, so a rerun makes no request

A query of five words or more is never found verbatim in the corpus the set
is evaluated on: sentences repeated in the corpus are no queries. How well a
generated set ranks configurations like real labels is measured in
benchmarks/RESULTS.md (`ragbench datasets agreement`). The summary lists the
queries written, those dropped (and why) and the LLM requests made and cached."""

_LLM_OPTIONS = Group(
    "--method llm",
    (
        Arg("--base-url", help="OpenAI-compatible endpoint, e.g. https://api.openai.com/v1"),
        Arg("--model", help="chat model name"),
        Arg("--credential", help="credential name (see README: Endpoints and credentials)"),
        Arg(
            "--llm-cache",
            path="output folder",
            metavar="DIR",
            help="LLM cache root (default: the stage cache root)",
        ),
        _Number("--passage-words", "N", int, "words per passage shown to the model (default: 200)"),
        _Number(
            "--min-match",
            "S",
            float,
            "lowest fuzzy match score (0-100) of an excerpt not found verbatim (default: 90)",
        ),
        Arg(
            "--embedder",
            metavar="JSON",
            help="embedder spec for near-duplicate questions (default: sentence-transformers)",
        ),
        _Number(
            "--dedup",
            "T",
            float,
            "drop a question more similar than T (cosine) to an earlier one (default: 0.95; "
            "1: keep all)",
        ),
        _Number(
            "--max-overlap",
            "F",
            float,
            "drop a question when more than the share F of its content words are in its "
            "excerpts (default: keep all)",
        ),
        _Number(
            "--multi-hop",
            "K",
            int,
            "K of the N questions over passages of two documents (default: 0)",
        ),
    ),
)

_GENERATE = Command(
    "generate",
    help="generate a span-labeled set from documents (ict, headings or an LLM)",
    description=_GENERATE_DESCRIPTION,
    raw_description=True,
    args=(
        Arg(
            "corpus",
            path="input path",
            names=True,
            help="file or folder of documents, or a labeled set",
        ),
        *globs("CORPUS"),
        Arg("--out", path="output folder", required=True, help="folder to write (new or empty)"),
        Arg("--method", default="ict", metavar="{ict,headings,llm}", help="(default: ict)"),
        _Number("--n", "N", int, "queries judged at --level to generate (default: 50)"),
        Arg(
            "--level",
            metavar="{document,chunk,span}",
            help="the evaluation level (evaluation.level) the N queries are judged at: document "
            "(the default, as a run's and optimize's), chunk or span; drawn queries judged at "
            "other levels only are left out",
        ),
        _Number("--seed", "S", int, "sampling seed (default: 0)"),
        _Number(
            "--min-words",
            "N",
            int,
            "skip a sentence (ict, default 8), section (headings, 20) or passage (llm, 30) "
            "of fewer words",
        ),
        _Number("--window", "W", int, "ict: sentences of context on each side (default: 2)"),
        _Number(
            "--evidence-terms",
            "K",
            int,
            "ict: terms a context sentence shares with the query to be its evidence (default: 3)",
        ),
        _Number(
            "--repeated-share",
            "F",
            float,
            "ict: a query with evidence whose context repeats more than the share F of its "
            "terms is judged at the chunk and span levels only (default: 0.45; 1: never)",
        ),
        Arg(
            "--keep-numbers", action="store_true", help="ict: sentences with digits may be queries"
        ),
        Arg(
            "--keep-references",
            action="store_true",
            help="ict: sentences that open by referring back (This, However, ...) may be queries",
        ),
        _LLM_OPTIONS,
    ),
    run=_generate,
)

_AGREEMENT_DESCRIPTION = (
    "Run the sweep of --config on REAL and on SYNTH (its dataset replaced by "
    "each; no honest selection) into --out/real and --out/synthetic, resuming runs that "
    "exist, and print how alike the two sets rank the trials by their mean --metric: "
    "Kendall tau-b (with a 95% bootstrap interval over each set's queries) and Spearman "
    "rho, top-1 agreement (each set's best and its rank on the other; a tie is shown as "
    "one), the regret of the synthetic pick on real labels, each set's confidence in its "
    "pick (share of bootstrap resamples in which it is best), top-3 overlap and the trials "
    "that swap places."
)

_AGREEMENT = Command(
    "agreement",
    help="do two labeled sets (real, generated) rank a sweep's trials alike?",
    description=_AGREEMENT_DESCRIPTION,
    args=(
        Arg(
            "real",
            path="input folder",
            names=True,
            help="the labeled set with real labels (path or name)",
        ),
        Arg(
            "synthetic",
            path="input folder",
            names=True,
            help="the generated set (`ragbench datasets generate`)",
        ),
        Arg(
            "--config",
            path="input file",
            required=True,
            help="the sweep (an experiment YAML file)",
        ),
        Arg("--metric", help="metric to rank by (default: the config's first)"),
        Arg(
            "--out",
            path="output folder",
            help="parent of the two run directories (default: runs/agreement-<name>)",
        ),
        Arg("--limit-queries", type=int, help="only the first N queries of each"),
        Arg("--overwrite", action="store_true", help="run both sweeps again instead of resuming"),
        Arg(
            "--resamples",
            type=at_least_one,
            default=1000,
            help="bootstrap resamples of each set's queries (default: 1000)",
        ),
        Arg("--seed", type=int, default=0, help="seed of the resamples"),
    ),
    run=_agreement,
)

_JUDGE_DESCRIPTION = (
    "Sample --queries queries (seeded) of the split the runs evaluated, pool "
    "the top --depth documents of every finished trial of the runs for each, and ask for a "
    "grade per document (0 not relevant, 1 partly, 2 relevant; s skips the query, b goes "
    "back, q saves and quits), one answer a line on stdin. Each query's grades are written "
    "to SET's queries.jsonl as a new line <id>~judged of split 'judged' when its last "
    "document is graded; queries judged before are passed over, so a session resumes. "
    "Evaluate them over the same corpus and cuts: ragbench run CONFIG --dataset SET --set "
    "dataset.split=judged. --agreement then runs each run's sweep on the judged split "
    "(into <run>-judged) and prints how alike it ranks the trials (Kendall tau-b with its "
    "95%% bootstrap interval)."
)

_JUDGE = Command(
    "judge",
    help="judge a generated set's queries by hand in the terminal (split judged)",
    description=_JUDGE_DESCRIPTION,
    args=(
        Arg(
            "set",
            path="input folder",
            help="the generated set (or a plain folder with queries.jsonl)",
        ),
        Arg(
            "--run",
            path="input folder",
            action="append",
            required=True,
            metavar="RUN",
            help="a run directory of a sweep on SET (repeat for several)",
        ),
        Arg("--queries", type=int, default=20, metavar="N", help="(default: 20)"),
        Arg("--depth", type=int, default=5, metavar="K", help="documents per trial (default: 5)"),
        Arg("--seed", type=int, default=0, metavar="S", help="sampling seed"),
        Arg(
            "--agreement",
            action="store_true",
            help="after judging, the agreement of each run with the judged queries",
        ),
        Arg("--metric", help="--agreement: metric to rank by (default: the run's first)"),
        Arg(
            "--resamples",
            type=at_least_one,
            default=1000,
            help="--agreement: bootstrap resamples of each side's queries (default: 1000)",
        ),
    ),
    run=_judge,
)

COMMANDS = (_GENERATE, _AGREEMENT, _JUDGE)
