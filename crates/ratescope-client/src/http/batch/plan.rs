//! `BatchPlan`: an endpoint's batching as written in a profile or on the command line
//! (`ids:50:20ms`: the query parameter, the max size, the max wait).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::{BatchSettings, IdsQuery};
use crate::engine::{format_period, parse_duration};

/// How an endpoint's item requests are batched: ids into `query`, flushed by `settings`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPlan {
    /// Where the ids go (`ids=1,2,3`).
    pub query: IdsQuery,
    /// When a batch is sent.
    pub settings: BatchSettings,
}

impl BatchPlan {
    /// A plan from its parts, each checked; `separator` defaults to a comma.
    pub fn new(param: &str, separator: Option<&str>, max_size: usize, max_wait: Duration) -> Result<Self, String> {
        let query = IdsQuery::new(param, separator.unwrap_or(",")).map_err(|err| err.to_string())?;
        let settings = BatchSettings::new(max_size, max_wait).map_err(|err| err.to_string())?;
        Ok(Self { query, settings })
    }
}

impl FromStr for BatchPlan {
    type Err = String;

    /// `PARAM:SIZE:WAIT`, e.g. `ids:50:20ms`.
    fn from_str(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split(':').map(str::trim).collect();
        let [param, size, wait] = parts.as_slice() else {
            return Err(format!("batch {text:?} is not PARAM:SIZE:WAIT, e.g. ids:50:20ms"));
        };
        let size = size.parse::<usize>().map_err(|_| format!("batch: max size {size:?} is not a whole number"))?;
        let wait = parse_duration(wait).map_err(|err| format!("batch: max wait: {err}"))?;
        Self::new(param, None, size, wait)
    }
}

impl fmt::Display for BatchPlan {
    /// `ids:50:20ms` (the separator is shown only when it is not a comma).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.query.param, self.settings.max_size, format_period(self.settings.max_wait))?;
        if self.query.separator != "," {
            write!(f, " (separator {:?})", self.query.separator)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_reads_param_size_and_wait() {
        let plan: BatchPlan = "ids:50:20ms".parse().unwrap();
        assert_eq!(plan.query.param, "ids");
        assert_eq!(plan.settings, BatchSettings { max_size: 50, max_wait: Duration::from_millis(20) });
        assert!("ids:0:20ms".parse::<BatchPlan>().unwrap_err().contains("at least one item"));
        assert!("ids:5:0s".parse::<BatchPlan>().unwrap_err().contains("above zero"));
        assert!("ids:5".parse::<BatchPlan>().unwrap_err().contains("PARAM:SIZE:WAIT"));
        assert!("ids:x:5ms".parse::<BatchPlan>().unwrap_err().contains("whole number"));
    }
}
