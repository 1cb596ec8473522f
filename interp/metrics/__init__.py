"""The papers' attention metrics and the flip-flop probes, as pure functions of tensors, and the
capture of the maps they read.

``attention``: maps ``[batch, head, query_pos, key_pos]`` (or ``{layer: map}``) -> tidy frames
(TDA paper Sec. 3, App. B, App. E.1). ``probes``: flip-flop reads, glitches, and attention on
the last write's bit wherever the model moved it, or on the write itself (flip-flop paper Fig. 5,
12, 14). ``anatomy``: where the final layer looks at each read and which logit term decided it, and the
intervals of shares and means (Wilson, t). ``capture``: running a model for its maps, collected or streamed layer by layer.
Nothing here imports ``models`` but the checks of the arguments (``models.validate``: a bad argument
is a one-line ``ValueError`` or ``TypeError`` naming it) and of token ids (``models.tokens``).

The shapes are in the signatures (jaxtyping), with TransformerLens's axis names: ``batch``, ``pos``
(token positions), ``head``, ``query_pos`` and ``key_pos`` (a map's rows and columns), ``d_head``,
``d_vocab``; ``read`` counts the reads of :func:`read_table`. ``Map`` is one layer's map, ``Maps``
one map or one per layer, ``Tokens`` the token ids ``[batch, pos]``.
"""

from interp.metrics.attention import (
    EPS, Map, Maps, by_layer, cache_maps, causal, cross_view_correlation, dispersion, effective_entropy,
    entropy_summary, gaussian_tail, inhibition, l1_normalised, last_row_dispersion, magnitudes, max_abs_weight,
    peak_cooccurrence, raw_logits, sink_eps, sink_ratio, sparsity, summarise, survivor_counts, survivor_growth,
    survivor_scaling, t_interval, tail_probabilities, zero_rows,
)
from interp.metrics.anatomy import (
    DESTINATIONS, LOSING_TERMS, OTHER, RECENT_TOKENS, REGIONS, SPREAD, attention_destinations, destination,
    growth_exponent, key_regions, logit_split, mean_interval, region_masses, retrieval_head, share_table,
    wilson_interval,
)
from interp.metrics.capture import DEFAULT_LENGTHS, MissingHookError, capture_maps, heatmap_window
from interp.metrics.probes import (
    MIN_CARRIER_SHARE, Tokens, automaton_write_attention, automaton_write_positions, bit_carrier_attention,
    bit_carrier_summary, bit_carriers, bit_carriers_in_tokens, error_rate_by_dependency, glitch_table,
    last_write_attention, last_write_summary, mean_by_key_token, off_target_peak, sharp_share, propagate_bit_carriers,
    read_table,
)
