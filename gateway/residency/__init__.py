"""Local models in memory: memory plans per deployment (placement) and models loaded on
demand, unloaded when idle and evicted under a memory budget.

Imports backends, the model files layer and the planner; never dispatch or the HTTP layer.
"""
