"""The paper's mathematical objects and their estimators: attention on measures, token laws and their
tilts, concentration, in-context regression and its risks, the infinite-prompt gradient flow."""
