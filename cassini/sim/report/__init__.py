"""What a simulation run writes: tables, ``results.json``, the HTML report and its
pictures, link recordings, GPU utilisation and sweeps."""
