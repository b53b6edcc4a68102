"""Phase 5, runs of days: checkpoint cost, failures drawn from MTBF, stragglers, goodput and the best checkpoint interval.
"""
