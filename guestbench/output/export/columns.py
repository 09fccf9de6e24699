"""The CSV exports' headers: stable contracts for scripts (never reorder or rename a column; new ones are only added
at the end). Their own home, light to import: the command line's help quotes them."""

RESULTS = ("backend,placement,measurement,n,failures,median_s,mean_s,stdev_s,ci_low_s,ci_high_s,mb_per_s,"
           "median_cpu_s,median_peak_mib")
"""`show --csv` and `scenario --csv`: one line per cell (a fleet run's lines add `host`)."""

COMPARISON = ("backend,placement,measurement,n_base,n_other,median_base_s,median_other_s,ratio,ratio_ci_low,"
              "ratio_ci_high,p_value,verdict,regression")
"""`compare --csv` and `ab --csv`: one line per compared row."""
