"""Calibration: profiles (efficiency curves and link factors as data), fitting, validation against published runs, the real PyTorch backend.
"""
