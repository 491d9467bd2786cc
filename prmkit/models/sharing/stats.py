"""What prefix sharing (:mod:`prmkit.models.sharing.prefix`) computed and saved: its accounting, read by
``prmkit score``, ``eval bestofn``, the server and ``bench/prefix.py``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ShareStats:
    """What prefix sharing computed and saved (real tokens; the accounting paragraph of
    :mod:`prmkit.models.sharing.prefix`)."""

    groups: int = 0           # groups whose prefix was computed once
    candidates: int = 0       # candidates scored on a prefix's cache (fallbacks included)
    alone: int = 0            # candidates read whole: no group, a group of one, no reuse
    fallbacks: int = 0        # candidates whose ids do not begin with their prefix's ids
    partial: int = 0          # ... of which reused the cache of the ids both share
    plain: int = 0            # tokens one-pass scoring feeds: every candidate whole
    computed: int = 0         # tokens fed here: prefixes once, suffixes, candidates alone
    padded: int = 0           # rows x width of every pass
    forwards: int = 0
    off: str = ""             # why some or all candidates were read plain, when not shared

    @property
    def saved(self) -> int:
        return self.plain - self.computed

    def summary(self) -> str:
        if self.off and not self.groups:
            return f"prefix sharing off: {self.off}"
        share = self.computed / self.plain if self.plain else 1.0
        off = f"; {self.off}" if self.off else ""
        return (f"prefix sharing: computed {self.computed} of {self.plain} tokens ({share:.1%}), "
                f"saved {self.saved}; {self.groups} groups, {self.candidates} candidates on a "
                f"shared prefix, {self.alone} read whole, {self.fallbacks} fallbacks "
                f"({self.partial} partial){off}")

    def add(self, other: "ShareStats") -> None:
        for name in self.__dataclass_fields__:
            if name == "off":
                self.off = self.off or other.off
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))
