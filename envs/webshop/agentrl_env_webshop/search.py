"""BM25 search over a catalog with tantivy (WebShop uses Lucene through pyserini).

The index is built once per catalog and kept on disk under ``index_dir/<catalog key>``; a worker
(and any later worker on the same machine) opens it and shares the one searcher among all its
sessions. A build writes into a scratch directory and renames it into place when complete, so
two workers starting together never read a half-built index.

Documents are WebShop's (title, description, first bullet point, options; lowercased), analysed
as Lucene's ``EnglishAnalyzer`` (pyserini's default) does, in tantivy's terms: split on
non-alphanumerics, lowercase, drop Lucene's 33 English stop words, English (Snowball) stemmer.
Dropping the stop words also keeps a long query from scoring nearly every document. A query is
the keywords through the same analysis (no query syntax is parsed): one OR-ed term clause per
term occurrence, scored by BM25, as pyserini's bag-of-words queries are (a repeated word counts
again).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import tantivy

from .catalog import Catalog

#: Bumped whenever the analysis or schema changes (it names the on-disk index).
INDEX_VERSION = 2
#: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``.
STOP_WORDS = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with"
).split()
_ANALYZER = "webshop_en"

#: Results a search returns (WebShop: ``SEARCH_RETURN_N``), shown 10 per page.
SEARCH_RETURN_N = 50
_COMPLETE = "COMPLETE"


def default_index_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "agentrl-envs" / "webshop"


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("id", stored=True, indexed=False)
    builder.add_text_field("contents", stored=False, tokenizer_name=_ANALYZER, index_option="freq")
    return builder.build()


def _analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.custom_stopword(STOP_WORDS))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _with_analyzer(index: tantivy.Index) -> tantivy.Index:
    index.register_tokenizer(_ANALYZER, _analyzer())
    return index


class SearchIndex:
    """A read-only BM25 index of one catalog; :meth:`search` is safe from any thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._index = _with_analyzer(tantivy.Index.open(str(path)))
        self._searcher = self._index.searcher()
        self._schema = _schema()
        self._analyzer = _analyzer()

    @classmethod
    def open_or_build(cls, catalog: Catalog, index_dir: str | Path | None = None, *, threads: int = 2) -> SearchIndex:
        """Open ``catalog``'s index under ``index_dir`` (default: :func:`default_index_dir`), building it first if absent."""
        root = Path(index_dir) if index_dir is not None else default_index_dir()
        path = root / f"{catalog.key}-index-v{INDEX_VERSION}"
        if not (path / _COMPLETE).exists():
            root.mkdir(parents=True, exist_ok=True)
            scratch = Path(tempfile.mkdtemp(prefix=f".{catalog.key}-", dir=root))
            try:
                build_index(catalog, scratch, threads=threads)
                (scratch / _COMPLETE).write_text(f"{len(catalog)}\n")
                try:
                    scratch.rename(path)
                except OSError:  # another worker finished first: use its index
                    if not (path / _COMPLETE).exists():
                        raise
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        return cls(path)

    def search(self, keywords: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """The catalog indices of the ``k`` best BM25 matches of ``keywords``, best first."""
        terms = self._analyzer.analyze(keywords)
        if not terms:
            return []
        should = tantivy.Occur.Should
        query = tantivy.Query.boolean_query(
            [(should, tantivy.Query.term_query(self._schema, "contents", t, index_option="freq")) for t in terms]
        )
        hits = self._searcher.search(query, k, count=False).hits
        return [self._searcher.doc(address)["id"][0] for _score, address in hits]

    @property
    def num_docs(self) -> int:
        return self._searcher.num_docs


def build_index(catalog: Catalog, path: Path, *, threads: int = 2) -> None:
    """Write the index of every product of ``catalog`` into the empty directory ``path``."""
    index = _with_analyzer(tantivy.Index(_schema(), path=str(path)))
    threads = max(1, min(threads, os.cpu_count() or 1))
    writer = index.writer(heap_size=64_000_000 * threads, num_threads=threads)
    for i, text in catalog.documents():
        writer.add_document(tantivy.Document(id=i, contents=text))
    writer.commit()
    writer.wait_merging_threads()
