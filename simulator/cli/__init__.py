"""The clustersim command line: one module per command and the one error path. Nothing else imports this package.
"""
