// Reason codes of a match player's verdict (spec 2.12), in check order, and the reason shape
// {code, message, metric?, value?, limit?}. The order here is THE order admission checks in:
// match-wide bounds, per-player metric bounds, the group stage (duplicate after a merge, rate
// windows), outliers, then event admission. A player records the reasons of one stage only.

export const reasonCodes = [
  'duration_out_of_bounds',
  'player_count_out_of_bounds',
  'metric_below_minimum',
  'metric_above_maximum',
  'metric_per_minute_exceeded',
  'duplicate_player_after_merge',
  'rate_limited',
  'outlier',
  'event_refused',
] as const;
export type ReasonCode = (typeof reasonCodes)[number];

/** The stage each code belongs to; a verdict's reasons all come from one stage. */
export const reasonStage = {
  duration_out_of_bounds: 'match_bounds',
  player_count_out_of_bounds: 'match_bounds',
  metric_below_minimum: 'metric_bounds',
  metric_above_maximum: 'metric_bounds',
  metric_per_minute_exceeded: 'metric_bounds',
  duplicate_player_after_merge: 'group',
  rate_limited: 'group',
  outlier: 'outliers',
  event_refused: 'event',
} as const satisfies Record<ReasonCode, string>;
export type Stage = (typeof reasonStage)[ReasonCode];

export interface Reason {
  code: ReasonCode;
  message: string;
  /** The metric key, for metric and outlier reasons. */
  metric?: string;
  /** The observed value: the metric, per-minute rate, duration seconds, player count or matches in the window. */
  value?: number;
  /** The bound crossed. */
  limit?: number;
}
