"""Communication: pricing of every collective of a plan on the fabric, the collective algorithms, routing over the NetworkX graph, max-min flows over time, closed forms.
"""
