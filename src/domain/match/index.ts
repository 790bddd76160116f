// Match results, pure parts (spec 2.11, 2.12, 3, 4.9): profiles, report validation, admission
// stages in check order, group rate windows, reviews, derived status and the rule-6 event.
// Re-exports only; the actors and gateway import from here.
export * from './admission.js';
export * from './profile.js';
export * from './rate.js';
export * from './reasons.js';
export * from './report.js';
export * from './verdict.js';
