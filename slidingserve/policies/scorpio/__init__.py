"""The SCORPIO baseline: deadline order, rejection, VBS admission and credit batching."""

from __future__ import annotations

from slidingserve.policies.scorpio.config import ScorpioConfig
from slidingserve.policies.scorpio.guards import CreditLedger, TpotState, ldf_order
from slidingserve.policies.scorpio.policy import ScorpioPolicy

__all__ = ["CreditLedger", "ScorpioConfig", "ScorpioPolicy", "TpotState", "ldf_order"]
