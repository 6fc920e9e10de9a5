//! What a power cut leaves in a cell's evidence: when it came (the
//! `fault.power-cut` action), and the provider turns it took from a store
//! that had not synced them, rebuilt from the provider's journal, which is
//! off the lazy mounts. The oracles judge consumption and completion by
//! them; the store is still the provider's truth for everything else.

use std::collections::BTreeMap;

use super::{ActionKind, Evidence, ProviderTurn, controller_id};
use crate::model::Fault;

impl Evidence {
    /// When the cell's last power cut dropped the unsynced writes (epoch
    /// ms, taken once every process of the cell was dead), if it had one.
    pub fn last_power_cut_ms(&self) -> Option<u64> {
        self.actions
            .iter()
            .filter(|a| a.what == ActionKind::Fault(Fault::PowerCut))
            .filter_map(|a| a.dead_at_epoch_ms())
            .max()
    }

    /// The turns the provider recorded before the cell's last power cut and
    /// the cut took from its store (it had not synced them, as its real
    /// product would not have): rebuilt from its journal (`turn.recorded`,
    /// and the status of its `turn.finished` before the cut, else
    /// `interrupted`, as a store reads a turn its process died in), with
    /// controller ids. Empty without a power cut.
    pub fn turns_lost_to_power_cut(&self) -> Vec<ProviderTurn> {
        let Some(cut_ms) = self.last_power_cut_ms() else {
            return Vec::new();
        };
        let before = || self.journal.iter().filter(move |j| j.ts_ms <= cut_ms);
        let finished: BTreeMap<&str, &str> = before()
            .filter(|j| j.fact.as_deref() == Some("turn.finished"))
            .filter_map(|j| Some((j.data["turn"].as_str()?, j.data["status"].as_str()?)))
            .collect();
        let mut lost: Vec<ProviderTurn> = Vec::new();
        for j in before().filter(|j| j.fact.as_deref() == Some("turn.recorded")) {
            let d = &j.data;
            let (Some(thread), Some(turn), Some(by)) = (
                d["thread"].as_str(),
                d["turn"].as_str(),
                d["authorized_by"].as_str(),
            ) else {
                continue;
            };
            if self.provider_turns.iter().any(|t| t.turn == turn)
                || lost.iter().any(|t| t.turn == turn)
            {
                continue;
            }
            lost.push(ProviderTurn {
                thread: thread.to_owned(),
                turn: turn.to_owned(),
                client_id: d["client_id"].as_str().map(controller_id),
                status: finished
                    .get(turn)
                    .copied()
                    .unwrap_or("interrupted")
                    .to_owned(),
                continuation: d["continuation"].as_bool().unwrap_or(false),
                authorized_by: controller_id(by),
                model_requests: None,
            });
        }
        lost
    }

    /// The provider's turns as the oracles judge consumption and completion
    /// by: its store, and the turns a power cut took from it
    /// ([`Evidence::turns_lost_to_power_cut`]).
    pub fn provider_turns_and_lost(&self) -> Vec<ProviderTurn> {
        let mut all = self.provider_turns.clone();
        all.extend(self.turns_lost_to_power_cut());
        all
    }
}
