"""Progress bars of a conversion: each bar prints its final line once.

tqdm prints a bar's line from ``update()`` (at most every ``mininterval`` seconds) and again
from ``close()``, which redraws the final state with the overall rate. When the last
``update()`` reaches the total it usually prints too, so a log (where ``\\r`` does not
overwrite) showed the 100% line twice. :func:`advance` counts that last step without
drawing it; ``close()`` draws it, once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["advance"]


def advance(bar: tqdm[Any], n: int) -> None:
    """``bar.update(n)``, except that the step reaching ``bar.total`` is left to ``close()``.

    >>> import io
    >>> from tqdm import tqdm
    >>> log = io.StringIO()
    >>> with tqdm(total=3, file=log, mininterval=0, miniters=1) as bar:
    ...     advance(bar, 2)
    ...     advance(bar, 1)
    >>> log.getvalue().count("3/3")
    1
    """
    if bar.total is not None and bar.n + n >= bar.total:
        bar.n += n  # no draw: closing the bar draws the final line
    else:
        bar.update(n)
